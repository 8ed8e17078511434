"""The tool contracts through the real server process, as a client sends them.

A client that validates against the listed schema, and a model that writes `5.0` for five,
send numbers with a zero fraction; a strict-mode model sends every argument, null for those
it leaves to the server. Both arrive as JSON text and go through the whole server: the JSON
guard, the sanitizer, every tool's validation path (the file read's inline one, the SQL
tool's checked one, the generic one), and the tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import ServerProcess, running_server
from tests.support.postgres import PostgresServer

TEXT = "0123456789abcdefghijklmnopqrstuvwxyz\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text(TEXT, "utf-8")
    for index in range(12):
        (tmp_path / f"file{index:02}.txt").write_text("x", "utf-8")
    environment = {"MCP_SAFE_DATA_DIR": str(tmp_path), "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}
    with running_server(environment) as process:
        process.initialize()
        yield process


def call(server: ServerProcess, name: str, arguments_json: str) -> dict[str, Any]:
    """Call a tool with its arguments written as JSON text, exactly as given."""
    frame = (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":'
        f'{{"name":"{name}","arguments":{arguments_json}}}}}\n'
    )
    server.send_raw(frame.encode())
    response = server.recv()
    assert response["id"] == 7
    result: dict[str, Any] = response["result"]
    return result


@pytest.mark.e2e
def test_numbers_with_a_zero_fraction_are_integers(server: ServerProcess) -> None:
    read = call(
        server, "sandbox_fs_read", '{"relative_path":"notes/a.txt","max_bytes":16.0,"offset":0.0}'
    )
    assert read["isError"] is False, read
    assert read["structuredContent"]["content"] == TEXT[:16]
    moved = call(
        server, "sandbox_fs_read", '{"relative_path":"notes/a.txt","max_bytes":4,"offset":1e1}'
    )
    assert moved["structuredContent"]["content"] == TEXT[10:14]
    listed = call(server, "sandbox_fs_list", '{"relative_path":".","max_entries":10.0}')
    assert len(listed["structuredContent"]["entries"]) == 10
    assert listed["structuredContent"]["truncated"] is True


@pytest.mark.e2e
def test_fractions_and_huge_numbers_are_refused_in_band(server: ServerProcess) -> None:
    for arguments, fault in [
        ('{"relative_path":"notes/a.txt","max_bytes":16.5}', "max_bytes"),
        ('{"relative_path":"notes/a.txt","max_bytes":1e300}', "max_bytes"),
        ('{"relative_path":"notes/a.txt","offset":-1e300}', "offset"),
        ('{"relative_path":"notes/a.txt","offset":true}', "offset"),
    ]:
        refused = call(server, "sandbox_fs_read", arguments)
        assert refused["isError"] is True, arguments
        problem = json.loads(refused["content"][0]["text"])
        assert (problem["code"], problem["invalid_params"]) == ("MCP_VALIDATION_ERROR", [fault])


@pytest.mark.e2e
def test_a_strict_mode_call_sends_null_for_each_default(server: ServerProcess) -> None:
    read = call(
        server,
        "sandbox_fs_read",
        '{"relative_path":"notes/a.txt","encoding":null,"max_bytes":null,"offset":null}',
    )
    assert read["structuredContent"]["content"] == TEXT
    listed = call(server, "sandbox_fs_list", '{"relative_path":null,"max_entries":null}')
    assert len(listed["structuredContent"]["entries"]) == 13
    metrics = call(server, "system_metrics", '{"include_disk":null}')
    assert metrics["structuredContent"]["disk_percent_used"] is None


@pytest.mark.e2e
@pytest.mark.postgres
def test_read_only_sql_takes_a_zero_fraction_and_null(postgres_server: PostgresServer) -> None:
    environment = {"MCP_SQL_DSN": postgres_server.dsn(), "MCP_METRICS_ENABLED": "false"}
    with running_server(environment) as server:
        server.initialize()
        five = call(server, "read_only_sql", '{"query":"SELECT id FROM t","max_rows":5.0}')
        assert five["structuredContent"]["row_count"] == 5, five
        default = call(server, "read_only_sql", '{"query":"SELECT id FROM t","max_rows":null}')
        assert default["structuredContent"]["row_count"] == 50, default
        schema = call(server, "sql_schema", '{"table":null}')
        assert schema["isError"] is False, schema
        refused = call(server, "read_only_sql", '{"query":"SELECT id FROM t","max_rows":5.5}')
        assert json.loads(refused["content"][0]["text"])["invalid_params"] == ["max_rows"]
