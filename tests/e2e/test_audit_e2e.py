"""The audit trail through the real server: one record per call, every outcome, no secret.

The server runs as `python -X dev -m mcp_server_suite` (tests/support/harness.py). Write
failures are real ones: the test lowers the running server's file-size limit
(`RLIMIT_FSIZE`) below the end of its audit log, so every append fails with `EFBIG` while
the rest of the process (its coverage data included) writes as usual.
"""

from __future__ import annotations

import json
import resource
import time
import uuid
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support.harness import ServerProcess, running_server
from tests.support.postgres import PASSWORD_ROLE, PASSWORD_ROLE_SECRET, PostgresServer


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A sandbox holding hello.txt (the package's own tests carry no examples/ directory)."""
    root = tmp_path_factory.mktemp("data")
    (root / "hello.txt").write_text("Hello from the audit tests.\n", encoding="utf-8")
    return str(root)


# Larger than any coverage data file the server writes at exit: only the audit log, grown to
# this size beforehand, is pushed past the limit.
_FILE_SIZE_LIMIT = 64 * 1024 * 1024


def call(request_id: Any, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def cancel(request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id},
    }


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def read_records(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="ascii")
    assert text.endswith("\n") or not text
    return [json.loads(line) for line in text.splitlines()]


def stderr_records(server: ServerProcess) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in server.stderr.splitlines()
        if line.startswith('{"audit":"tools/call"')
    ]


def finish(server: ServerProcess, *, crashed: bool = False) -> None:
    server.close_stdin()
    assert server.wait() == 0
    # A crash's traceback is logged under its correlation id, on purpose.
    assert ("Traceback" in server.stderr) is crashed, server.stderr


def by_id(records: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {record["request_id"]: record for record in records}


@pytest.mark.e2e
def test_every_outcome_is_recorded_once(tmp_path: Path, data: str) -> None:
    log = tmp_path / "audit.jsonl"
    env = {
        "MCP_AUDIT_LOG": str(log),
        "MCP_SAFE_DATA_DIR": data,
        # A metrics call samples the CPU for 2 s, so it can be timed out and cancelled.
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "2",
        "MCP_TOOL_TIMEOUT_SECONDS": "1",
    }
    with running_server(env) as server:
        server.initialize()
        assert server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})["result"]
        server.send(call("denied", "sandbox_fs_read", relative_path="../../etc/passwd"))
        server.send(call("invalid", "sandbox_fs_read", relative_path=""))
        server.send(call("slow", "system_metrics"))
        server.send(call("cancelled", "system_metrics"))
        time.sleep(0.2)
        server.send(cancel("cancelled"))
        server.send_raw(frame(call("unstarted", "system_metrics")) + frame(cancel("unstarted")))
        server.recv_through("slow", timeout=10)
        finish(server)
    records = by_id(read_records(log))
    assert set(records) == {1002, "denied", "invalid", "slow", "cancelled", "unstarted"}
    outcomes = {request_id: record["outcome"] for request_id, record in records.items()}
    assert outcomes == {
        1002: "ok",
        "denied": "MCP_ACCESS_DENIED",
        "invalid": "MCP_VALIDATION_ERROR",
        "slow": "timeout",
        "cancelled": "cancelled",
        "unstarted": "cancelled",
    }
    ok = records[1002]
    assert ok["tool"] == "sandbox_fs_read"
    assert ok["client"] == {"name": "test-client", "version": "1.0"}
    assert ok["bytes"] > 0
    assert "rows" not in ok
    assert records["slow"]["duration_ms"] >= 900
    assert records["unstarted"]["duration_ms"] == 0
    assert len({record["session"] for record in records.values()}) == 1


@pytest.mark.e2e
def test_two_sessions_share_one_log_without_mixing_lines(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    env = {"MCP_AUDIT_LOG": str(log), "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}
    with running_server(env) as first, running_server(env) as second:
        first.initialize()
        second.initialize()
        for request_id in range(40):
            first.send(call(request_id, "system_metrics"))
            second.send(call(request_id, "system_metrics"))
        for server in (first, second):
            server.recv_through(39)
            finish(server)
    records = read_records(log)
    assert len(records) == 80
    sessions = {record["session"] for record in records}
    assert len(sessions) == 2
    for session in sessions:
        ids = sorted(r["request_id"] for r in records if r["session"] == session)
        assert ids == list(range(40))


@pytest.mark.e2e
def test_stderr_is_the_default_destination(data: str) -> None:
    with running_server({"MCP_SAFE_DATA_DIR": data}) as server:
        server.initialize()
        server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})
        finish(server)
    (record,) = stderr_records(server)
    assert record["outcome"] == "ok"
    assert "arguments" not in record


@pytest.mark.e2e
def test_off_records_nothing(data: str) -> None:
    with running_server({"MCP_SAFE_DATA_DIR": data, "MCP_AUDIT_LOG": "off"}) as server:
        server.initialize()
        server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})
        finish(server)
    assert stderr_records(server) == []


def limit_file_size(pid: int, soft: int) -> None:
    """Set the soft file-size limit of a process (the hard one stays, so it can be raised)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))


def full_log(tmp_path: Path) -> Path:
    """An audit log already at the file-size limit the test will set."""
    log = tmp_path / "audit.jsonl"
    with log.open("wb") as handle:
        handle.truncate(_FILE_SIZE_LIMIT)
    return log


@pytest.mark.e2e
def test_a_failed_write_is_reported_once_and_calls_go_on(tmp_path: Path, data: str) -> None:
    log = full_log(tmp_path)
    with running_server({"MCP_AUDIT_LOG": str(log), "MCP_SAFE_DATA_DIR": data}) as server:
        server.initialize()
        limit_file_size(server.pid, _FILE_SIZE_LIMIT)
        for _ in range(3):
            response = server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})
            assert response["result"]["isError"] is False
        finish(server)
    assert log.stat().st_size == _FILE_SIZE_LIMIT
    assert server.stderr.count("audit trail: a record could not be written") == 1
    assert "(EFBIG)" in server.stderr


# A cached file read is answered before the event loop starts; a metrics reading runs in a
# worker thread, on the event loop. Both paths must withhold what they cannot record.
_REQUIRED_TRAIL_CALLS: Final = [
    pytest.param("sandbox_fs_read", {"relative_path": "hello.txt"}, "Hello", id="inline"),
    pytest.param("system_metrics", {}, "utilization", id="event-loop"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("tool", "arguments", "withheld"), _REQUIRED_TRAIL_CALLS)
def test_a_required_trail_withholds_results_it_cannot_record(
    tmp_path: Path, data: str, tool: str, arguments: dict[str, object], withheld: str
) -> None:
    log = full_log(tmp_path)
    env = {
        "MCP_AUDIT_LOG": str(log),
        "MCP_AUDIT_REQUIRED": "true",
        "MCP_SAFE_DATA_DIR": data,
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01",
    }
    with running_server(env) as server:
        server.initialize()
        assert server.call_tool(tool, arguments)["result"]["isError"] is False
        limit_file_size(server.pid, _FILE_SIZE_LIMIT)
        for _ in range(2):
            result = server.call_tool(tool, arguments)["result"]
            assert result["isError"] is True
            assert "structuredContent" not in result
            problem = json.loads(result["content"][0]["text"])
            assert problem["code"] == "MCP_INTERNAL_ERROR"
            assert problem["metadata"] == {"retryable": True, "audit": "unavailable"}
            assert withheld not in result["content"][0]["text"]
        # The disk has room again: calls are answered, and recorded, as before.
        limit_file_size(server.pid, resource.RLIM_INFINITY)
        response = server.call_tool(tool, arguments)
        assert response["result"]["isError"] is False
        finish(server)
    assert server.stderr.count("audit trail: a record could not be written") == 1
    assert "refused (MCP_AUDIT_REQUIRED)" in server.stderr
    with log.open("rb") as handle:
        handle.seek(_FILE_SIZE_LIMIT)
        tail = handle.read().decode("ascii").splitlines()
    assert [json.loads(line)["request_id"] for line in tail] == [1002, 1005]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"MCP_AUDIT_LOG": "relative.jsonl"}, "MCP_AUDIT_LOG"),
        ({"MCP_AUDIT_LOG": "/"}, "MCP_AUDIT_LOG"),
        ({"MCP_AUDIT_LOG": "journal"}, "MCP_AUDIT_LOG"),
        ({"MCP_AUDIT_ARGUMENTS": "sql"}, "MCP_AUDIT_ARGUMENTS"),
        ({"MCP_AUDIT_REQUIRED": "maybe"}, "MCP_AUDIT_REQUIRED"),
        ({"MCP_AUDIT_REQUIRED": "true", "MCP_AUDIT_LOG": "off"}, "MCP_AUDIT_REQUIRED"),
    ],
)
def test_an_unusable_destination_stops_the_server_with_78(
    env: dict[str, str], variable: str
) -> None:
    # This machine runs no journald: the journal is unusable here, as it should be.
    with running_server(env) as server:
        assert server.wait() == 78
    lines = server.stderr.splitlines()
    assert len(lines) == 1, server.stderr
    assert variable in lines[0]


@pytest.mark.e2e
def test_no_secret_reaches_the_trail(tmp_path: Path) -> None:
    # The connection fails (nothing listens in tmp_path): the path where a driver's message
    # is most likely to carry the connection string, recorded in full.
    canary = "Audit-canary-" + uuid.uuid4().hex
    log = tmp_path / "audit.jsonl"
    env = {
        "MCP_SQL_DSN": f"postgresql://u:{canary}@/db?host={tmp_path}",
        "MCP_SQL_CONNECT_TIMEOUT": "0.5",
        "MCP_AUDIT_LOG": str(log),
        "MCP_AUDIT_ARGUMENTS": "full",
    }
    with running_server(env) as server:
        server.initialize()
        response = server.call_tool("read_only_sql", {"query": "SELECT 1"})
        finish(server)
    assert response["result"]["isError"] is True
    (record,) = read_records(log)
    # The database's failure is an in-band problem, recorded under its code.
    assert record["outcome"] == "MCP_INTERNAL_ERROR"
    assert record["arguments"] == {"query": "SELECT 1"}
    assert canary not in log.read_text(encoding="ascii")
    assert canary not in server.stderr


@pytest.mark.e2e
@pytest.mark.postgres
def test_sql_calls_record_their_rows_and_never_the_password(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    env = {
        "MCP_SQL_DSN": postgres_server.dsn(PASSWORD_ROLE, password=PASSWORD_ROLE_SECRET),
        "MCP_AUDIT_LOG": str(log),
        "MCP_AUDIT_ARGUMENTS": "full",
        "MCP_METRICS_ENABLED": "false",
    }
    with running_server(env) as server:
        server.initialize()
        query = "SELECT g FROM generate_series(1, 3) AS g"
        result = server.call_tool("read_only_sql", {"query": query})["result"]
        assert result["isError"] is False
        server.call_tool("read_only_sql", {"query": "SELECT 1; SELECT 2"})
        finish(server)
    ok, refused = read_records(log)
    assert (ok["outcome"], ok["rows"], ok["arguments"]) == ("ok", 3, {"query": query})
    assert ok["bytes"] == len(result["content"][0]["text"].encode())
    assert refused["outcome"] == "MCP_QUERY_VIOLATION"
    assert PASSWORD_ROLE_SECRET not in log.read_text(encoding="ascii")
    assert PASSWORD_ROLE_SECRET not in server.stderr
