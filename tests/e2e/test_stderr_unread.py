"""A client that never reads the server's stderr (issue 21, item 1).

Node's `stdio: ['pipe', 'pipe', 'pipe']` without a listener, or the TypeScript SDK's
`StdioClientTransport` with `stderr: 'pipe'` unconsumed: the MCP stdio transport says a client
MAY ignore stderr. With the audit trail on stderr (the default), the server used to stop
answering after 147 to 193 calls, pings included, blocked in `write(2, ...)`, and SIGTERM,
SIGINT and end of input could not end it.

Here stderr is a pipe of one page that the test never reads (`stderr_unread`): it is full
after a few dozen records. Every call must still be answered, in every phase (inline, on the
event loop), every signal must still end the server, and every record must be accounted for:
written, or dropped and counted in the report stderr gets once it is read again.
"""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

import pytest

from mcp_server_suite.audit.trail import BATCH_DELAY_S
from tests.support.harness import ServerProcess, running_server

pytestmark = pytest.mark.e2e

# Well past the 147 to 193 calls after which the server used to stop: one page of stderr
# holds about a dozen records of this size.
CALLS = 300
# Once stderr is read again, a record is written within this many calls: the first finds the
# pipe empty save on a machine so loaded that the reader has not caught up.
CALLS_TO_RECOVER = 20

# Records wait up to the trail's batch delay for more calls, and are written once input pauses
# that long: after each call the client waits this long for its record, a hundred times the
# delay, so a loaded machine still writes it in time while a lost record fails the test.
RECORD_WAIT_S = BATCH_DELAY_S * 100

# A signal ends the server at once when nothing is in flight; the bound leaves room for a
# loaded machine.
EXIT_WITHIN_S = 5.0

_REPORT = re.compile(
    r"stderr was full: (\d+) audit records? and (\d+) other messages? written meanwhile "
    r"were dropped"
)


def environment(sandbox: str, **extra: str) -> dict[str, str]:
    return {
        "MCP_SAFE_DATA_DIR": sandbox,
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.001",
        # Every record carries the arguments: stderr fills sooner.
        "MCP_AUDIT_ARGUMENTS": "full",
        **extra,
    }


def read_call(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "sandbox_fs_read", "arguments": {"relative_path": "hello.txt"}},
    }


def metrics_call(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "system_metrics", "arguments": {}},
    }


def records_in(stderr: str) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in stderr.splitlines() if line.startswith('{"audit":"tools/call"')
    ]


def record_written(server: ServerProcess, at_least: int) -> bool:
    """Whether a record of a call numbered `at_least` or more reaches stderr in time."""
    deadline = time.monotonic() + RECORD_WAIT_S
    while not any(record["request_id"] >= at_least for record in records_in(server.stderr)):
        if time.monotonic() > deadline:
            return False
        time.sleep(BATCH_DELAY_S)
    return True


def reported_drops(stderr: str) -> tuple[int, int]:
    found = [tuple(map(int, match.groups())) for match in _REPORT.finditer(stderr)]
    return sum(records for records, _ in found), sum(others for _, others in found)


@pytest.mark.parametrize("tool", ["sandbox_fs_read", "system_metrics"])
def test_every_call_is_answered_and_every_record_accounted_for(sandbox: str, tool: str) -> None:
    # sandbox_fs_read is answered in the blocking inline phase (a cached read), where the
    # server used to block; system_metrics on the event loop, in a worker thread.
    make = read_call if tool == "sandbox_fs_read" else metrics_call
    with running_server(environment(sandbox), stderr_unread=True) as server:
        server.initialize()
        for request_id in range(CALLS):
            server.send(make(request_id))
            answer = server.recv()
            assert answer["id"] == request_id
            assert answer["result"]["isError"] is False
            if request_id % 50 == 0:
                assert server.request("ping")["result"] == {}
        # The client starts reading stderr: the server reports what it dropped (a report for
        # each stretch of drops, as soon as stderr takes a line again). A one-page pipe can
        # still be found full while the reader catches up, so the client calls on until a
        # record of its own is written, which must come within a few calls.
        # The client pauses after each call, so that the trail writes the call's record
        # rather than waiting for more calls to batch it with.
        server.read_stderr()
        server.wait_stderr_drained()
        calls = CALLS
        while True:
            assert calls < CALLS + CALLS_TO_RECOVER, server.stderr
            server.send(make(calls))
            assert server.recv()["id"] == calls
            calls += 1
            server.wait_stderr_drained()
            if record_written(server, CALLS):
                break
        server.close_stdin()
        assert server.wait() == 0
    stderr = server.stderr
    written = {record["request_id"] for record in records_in(stderr)}
    dropped, _ = reported_drops(stderr)
    assert dropped > 0, stderr
    # Each call is written or counted, never both and never neither.
    assert written <= set(range(calls))
    assert len(written) + dropped == calls
    # The trail counts the same records lost, and says so when the session closes.
    assert f"audit trail: {dropped} records of this session could not be written" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
@pytest.mark.parametrize("tool", ["sandbox_fs_read", "system_metrics"])
def test_a_signal_ends_the_server_whose_stderr_is_full(
    sandbox: str, tool: str, signum: signal.Signals
) -> None:
    make = read_call if tool == "sandbox_fs_read" else metrics_call
    env = environment(sandbox, MCP_SERVER_SUITE_LOG_LEVEL="DEBUG")
    with running_server(env, stderr_unread=True) as server:
        server.initialize()
        for request_id in range(CALLS):
            server.send(make(request_id))
            assert server.recv()["id"] == request_id
        signalled = time.monotonic()
        server.signal(signum)
        assert server.wait(timeout=EXIT_WITHIN_S + 5) == 0
        assert time.monotonic() - signalled < EXIT_WITHIN_S


def test_end_of_input_ends_the_server_whose_stderr_is_full(sandbox: str) -> None:
    with running_server(environment(sandbox), stderr_unread=True) as server:
        server.initialize()
        for request_id in range(CALLS):
            server.send(read_call(request_id))
            assert server.recv()["id"] == request_id
        server.close_stdin()
        assert server.wait(timeout=EXIT_WITHIN_S) == 0


def test_a_required_trail_refuses_what_stderr_cannot_take_and_recovers(sandbox: str) -> None:
    # MCP_AUDIT_REQUIRED=true on a stderr nobody reads: once it is full, calls are refused
    # retryably (their results are withheld), pings are still answered, and once the client
    # reads stderr again calls are answered and recorded as before.
    env = environment(sandbox, MCP_AUDIT_REQUIRED="true")
    with running_server(env, stderr_unread=True) as server:
        server.initialize()
        refused = 0
        for _ in range(CALLS):
            result = server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})["result"]
            if result["isError"]:
                problem = json.loads(result["content"][0]["text"])
                assert problem["metadata"] == {"retryable": True, "audit": "unavailable"}
                assert "Hello" not in result["content"][0]["text"]
                refused += 1
        assert refused > 0
        assert server.request("ping")["result"] == {}
        server.read_stderr()
        # Stderr drains; the next call waits for nothing and is answered.
        server.wait_stderr_drained()
        answered = server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})
        assert answered["result"]["isError"] is False
        server.close_stdin()
        assert server.wait() == 0
    records = records_in(server.stderr)
    assert records[-1]["request_id"] == answered["id"]
    # No result left the server unrecorded: every call answered with its result has a record.
    assert len(records) == CALLS - refused + 1


def test_the_event_loop_takes_over_a_session_whose_stderr_is_full(sandbox: str) -> None:
    # Inline reads fill stderr; the first metrics call then starts the event loop, whose own
    # log lines (DEBUG) find stderr full from its first: the session goes on, and every call
    # of both phases is answered once and accounted for.
    env = environment(sandbox, MCP_SERVER_SUITE_LOG_LEVEL="DEBUG")
    with running_server(env, stderr_unread=True) as server:
        server.initialize()
        for request_id in range(CALLS):
            make = read_call if request_id < CALLS // 2 else metrics_call
            server.send(make(request_id))
            assert server.recv()["id"] == request_id
        server.read_stderr()
        server.close_stdin()
        assert server.wait() == 0
    stderr = server.stderr
    dropped, _ = reported_drops(stderr)
    assert len({record["request_id"] for record in records_in(stderr)}) + dropped == CALLS
    assert dropped > 0
