"""The real server as a subprocess: lifecycle, concurrency, framing, signals and leaks.

The tests spawn `python -X dev -m mcp_server_suite` through the shared harness, so asyncio
debug mode and resource warnings are on, and talk NDJSON to it; the task-leak test runs
`core.stdio.serve` in this process instead, where the event loop's tasks can be counted.
Assertions are about order and causality wherever possible ("the ping was answered before
the slow call"), not about timing; the few time bounds are generous, because the machine
running the suite is shared.

`system_metrics` is the slow call: `MCP_METRICS_CPU_SAMPLE_SECONDS` sets how long its CPU
sample takes, so a call can be kept in flight for as long as a test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite import SERVER_NAME, SERVER_TITLE, __version__
from mcp_server_suite.config import Settings
from mcp_server_suite.core.framing import MAX_FRAME_BYTES
from mcp_server_suite.core.server import Dispatcher
from mcp_server_suite.core.session import serve
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.tools import build_registry
from mcp_server_suite.workers import stop_workers
from tests.support.harness import (
    HANDSHAKE_VERSIONS,
    REPO_ROOT,
    ServerProcess,
    base_environment,
    initialize_params,
    running_server,
)

# A CPU sample this short makes a call cost what the server costs, not what the sample costs.
FAST = {"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.001"}

# The frame ceiling in KiB-free terms, for readable arithmetic below.
MIB = 1024 * 1024

# How much the server's peak RSS may grow while it is fed hostile volume. The framer holds at
# most one frame (1 MiB) plus one read chunk; a server that buffered whole lines would grow
# by the full volume (tens of MiB), far beyond this.
RSS_GROWTH_LIMIT_KIB = 16 * 1024


def slow(seconds: float, **extra: str) -> dict[str, str]:
    """Environment for a server whose `system_metrics` calls take about `seconds`."""
    return {"MCP_METRICS_CPU_SAMPLE_SECONDS": str(seconds), **extra}


def call(request_id: Any, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "system_metrics", "arguments": dict(arguments or {})},
    }


def ping(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


def cancel(request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": "test"},
    }


def frame(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def ids(messages: list[dict[str, Any]]) -> list[Any]:
    return [message.get("id") for message in messages]


def assert_clean_stderr(server: ServerProcess) -> None:
    """No traceback, unraisable exception or resource warning reached stderr."""
    for marker in ("Traceback", "ResourceWarning", "Exception ignored", "was never awaited"):
        assert marker not in server.stderr, server.stderr


def finish(server: ServerProcess) -> None:
    """End the input: nothing more arrives, the server exits 0, and stderr is clean."""
    server.close_stdin()
    assert read_to_eof(server) == []
    assert server.wait() == 0
    assert_clean_stderr(server)


def read_to_eof(server: ServerProcess, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Read every message until the server closes stdout."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            messages.append(server.recv(max(deadline - time.monotonic(), 0.001)))
        except EOFError:
            return messages


# --------------------------------------------------------------------------------------------
# Handshake and per-revision shaping
# --------------------------------------------------------------------------------------------

# Which optional members each revision's schema defines (see core/versions.py).
SHAPES = {
    "2024-11-05": {"annotations": False, "titles": False, "structured": False, "details": False},
    "2025-03-26": {"annotations": True, "titles": False, "structured": False, "details": False},
    "2025-06-18": {"annotations": True, "titles": True, "structured": True, "details": False},
    "2025-11-25": {"annotations": True, "titles": True, "structured": True, "details": True},
}

HINTS = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


def test_shapes_cover_every_supported_version() -> None:
    assert set(SHAPES) == set(HANDSHAKE_VERSIONS)


@pytest.mark.e2e
@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
def test_handshake_and_results_are_shaped_to_the_negotiated_revision(version: str) -> None:
    shape = SHAPES[version]
    with running_server(FAST) as server:
        init = server.initialize(version)
        assert init["protocolVersion"] == version
        assert init["capabilities"] == {"tools": {"listChanged": False}}
        assert isinstance(init["instructions"], str)
        assert init["instructions"]
        info = init["serverInfo"]
        expected_info = {"name", "version"}
        expected_info |= {"title"} if shape["titles"] else set()
        expected_info |= {"description"} if shape["details"] else set()
        assert set(info) == expected_info
        assert info["name"] == SERVER_NAME
        assert info["version"] == __version__
        if shape["titles"]:
            assert info["title"] == SERVER_TITLE

        (tool,) = server.request("tools/list")["result"]["tools"]
        expected_tool = {"name", "description", "inputSchema"}
        expected_tool |= {"annotations"} if shape["annotations"] else set()
        expected_tool |= {"title"} if shape["titles"] else set()
        expected_tool |= {"outputSchema"} if shape["structured"] else set()
        assert set(tool) == expected_tool
        assert tool["name"] == "system_metrics"
        assert tool["inputSchema"]["type"] == "object"
        if shape["annotations"]:
            assert tool["annotations"] == {"title": "System metrics", **HINTS}
        if shape["structured"]:
            assert tool["outputSchema"]["type"] == "object"

        success = server.call_tool("system_metrics", {})["result"]
        expected_result = {"content", "isError"}
        expected_result |= {"structuredContent"} if shape["structured"] else set()
        assert set(success) == expected_result
        assert success["isError"] is False
        (block,) = success["content"]
        assert block["type"] == "text"
        data = json.loads(block["text"])
        assert set(data) == {"cpu", "memory", "disk_percent_used", "timestamp_utc"}
        if shape["structured"]:
            assert success["structuredContent"] == data

        # An in-band refusal never carries structuredContent, in any revision.
        refused = server.call_tool("system_metrics", {"include_disk": "yes"})["result"]
        assert set(refused) == {"content", "isError"}
        assert refused["isError"] is True
        problem = json.loads(refused["content"][0]["text"])
        assert problem["code"] == "MCP_VALIDATION_ERROR"
        assert problem["invalid_params"] == ["include_disk"]
        finish(server)


@pytest.mark.e2e
@pytest.mark.parametrize("requested", ["1999-01-01", "2026-07-28", "2025-11-26", ""])
def test_unsupported_version_gets_the_latest_as_counter_offer(requested: str) -> None:
    with running_server(FAST) as server:
        init = server.initialize(requested)
        assert init["protocolVersion"] == HANDSHAKE_VERSIONS[0]
        # The session is a 2025-11-25 session from here on.
        assert "description" in init["serverInfo"]
        assert server.request("ping")["result"] == {}
        finish(server)


@pytest.mark.e2e
def test_lifecycle_before_and_after_initialize() -> None:
    with running_server(FAST) as server:
        # ping is allowed before initialize.
        assert server.request("ping")["result"] == {}
        # Other known requests are refused until initialize has been answered.
        for method, params in (
            ("tools/list", None),
            ("tools/call", {"name": "system_metrics", "arguments": {}}),
        ):
            error = server.request(method, params)["error"]
            assert error["code"] == -32600
            assert "initialize" in error["message"]
        # The ping opened a legacy session, so a 2026-07-28 probe is refused at once, and a
        # method the era lacks is -32601 at once: a client never waits for its fallback.
        started = time.monotonic()
        discover = server.request(
            "server/discover",
            {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        )
        assert time.monotonic() - started < 2.0  # the SDK's probe timeout is 10 s
        assert discover["error"]["code"] == -32600
        assert "handshake era" in discover["error"]["message"]
        assert server.request("server/discover")["error"]["code"] == -32601
        # Notifications before initialize, known or not, are never answered.
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
        server.send(ping("mark"))
        assert ids(server.recv_through("mark")) == ["mark"]

        init = server.initialize()
        assert init["protocolVersion"] == HANDSHAKE_VERSIONS[0]
        # A second initialize is refused, and the session keeps its first negotiation.
        again = server.request("initialize", initialize_params("2024-11-05"))["error"]
        assert again["code"] == -32600
        (tool,) = server.request("tools/list")["result"]["tools"]
        assert "outputSchema" in tool  # still 2025-11-25, not 2024-11-05
        # Unknown methods after initialize.
        for method in ("server/discover", "resources/list", "tools/execute", "", "PING"):
            assert server.request(method)["error"]["code"] == -32601
        # Invalid params of a known method.
        error = server.request("tools/list", {"cursor": "abc"})["error"]
        assert error["code"] == -32602
        error = server.request("tools/call", {"name": "no_such_tool", "arguments": {}})["error"]
        assert error["code"] == -32602
        assert error["data"]["invalid_params"] == ["name"]
        assert server.request("ping")["result"] == {}
        finish(server)


@pytest.mark.e2e
def test_initializing_state_serves_requests_before_the_initialized_notification() -> None:
    with running_server(FAST) as server:
        server.send(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params()}
        )
        assert server.recv()["id"] == 0
        # Cancelling initialize is not allowed by the lifecycle: ignored, no response.
        server.send(cancel(0))
        server.send(ping(1))
        assert ids(server.recv_through(1)) == [1]
        assert server.request("tools/list")["result"]["tools"]
        finish(server)


# --------------------------------------------------------------------------------------------
# Concurrency, cancellation, duplicate ids
# --------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_concurrent_calls_are_answered_out_of_order() -> None:
    with running_server(slow(1)) as server:
        server.initialize()
        server.send(call("slow"))
        # Refused by the argument schema, so it never samples: it finishes long before "slow".
        server.send(call("fast", {"include_disk": "yes"}))
        server.send(ping("ping"))
        messages = server.recv_through("slow")
        order = ids(messages)
        assert sorted(order) == ["fast", "ping", "slow"]
        assert order.index("ping") < order.index("slow")
        assert order.index("fast") < order.index("slow")
        by_id = {message["id"]: message for message in messages}
        assert by_id["slow"]["result"]["isError"] is False
        assert by_id["fast"]["result"]["isError"] is True
        finish(server)


@pytest.mark.e2e
def test_cancelled_call_never_gets_a_response_and_its_id_can_be_reused() -> None:
    sample = 0.3
    with running_server(slow(sample)) as server:
        server.initialize()
        server.send(call(5))
        server.send(cancel(5))
        server.send(ping("after-cancel"))
        assert ids(server.recv_through("after-cancel")) == ["after-cancel"]
        # The sampling thread runs its course; nothing may be written for id 5 even then.
        server.expect_silence(sample * 3)
        # The id is free again: a new call with it runs and is answered once.
        server.send(call(5))
        (response,) = server.recv_through(5)
        assert response["result"]["isError"] is False
        # Cancelling ids that are not in flight (finished, never used, malformed) is ignored.
        server.send(cancel(5))
        server.send(cancel("never-sent"))
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [5]})
        server.send(ping("end"))
        assert ids(server.recv_through("end")) == ["end"]
        server.expect_silence(0.3)
        finish(server)


@pytest.mark.e2e
def test_call_cancelled_before_it_starts_frees_its_id_and_does_not_delay_exit() -> None:
    # The cancel travels in the same write as its call, so the server reads both in one
    # chunk and cancels the task before it has taken a single step.
    with running_server(FAST) as server:
        server.initialize()
        server.send_raw(frame(call(5)) + frame(cancel(5)) + frame(ping("mark")))
        assert ids(server.recv_through("mark")) == ["mark"]
        server.send(call(5))
        (response,) = server.recv_through(5)
        assert response["result"]["isError"] is False
        server.send_raw(frame(call(6)) + frame(cancel(6)))
        server.close_stdin()
        closed_at = time.monotonic()
        assert read_to_eof(server) == []
        assert server.wait() == 0
        # Nothing is in flight, so nothing is drained: the 5 s grace period is not waited out.
        assert time.monotonic() - closed_at < 3.0
        assert_clean_stderr(server)


@pytest.mark.e2e
def test_cancelling_one_of_many_calls_leaves_the_others_alone() -> None:
    with running_server(slow(0.3)) as server:
        server.initialize()
        for request_id in range(1, 9):
            server.send(call(request_id))
        server.send(cancel(4))
        server.send(cancel(7))
        answered: list[Any] = []
        while len(answered) < 6:
            answered.append(server.recv()["id"])
        assert sorted(answered) == [1, 2, 3, 5, 6, 8]
        server.expect_silence(0.6)
        finish(server)


@pytest.mark.e2e
def test_duplicate_in_flight_id_is_refused_and_the_call_runs_once() -> None:
    with running_server(slow(0.5)) as server:
        server.initialize()
        server.send(call(7))
        server.send(call(7, {"include_disk": True}))
        server.send(ping(7))  # any request reusing an in-flight id is refused
        server.send(ping("mark"))
        before = server.recv_through("mark")
        assert [message["error"]["code"] for message in before[:-1]] == [-32600, -32600]
        assert ids(before[:-1]) == [7, 7]
        (result,) = server.recv_through(7)
        assert result["result"]["isError"] is False
        # The original call's arguments won: include_disk was not set.
        assert result["result"]["structuredContent"]["disk_percent_used"] is None
        server.expect_silence(0.6)
        finish(server)


@pytest.mark.e2e
def test_ids_are_compared_by_type_as_well_as_value() -> None:
    with running_server(slow(0.3)) as server:
        server.initialize()
        server.send(call(1))
        server.send(call("1"))  # a different id: both run
        answered = [server.recv()["id"], server.recv()["id"]]
        assert {(type(request_id), request_id) for request_id in answered} == {(int, 1), (str, "1")}
        finish(server)


# --------------------------------------------------------------------------------------------
# Malformed input, framing, oversized frames
# --------------------------------------------------------------------------------------------

# Each malformed line, and the id its error carries: null when no id can be read, the id
# when it can, even though the line breaks the rules elsewhere.
MALFORMED: list[tuple[bytes, int | None]] = [
    (b"not json", None),
    (b"\x00\x01\x02\xff", None),
    (b"42", None),
    (b"null", None),
    (b'"ping"', None),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
    (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"', 1),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping",}', 1),
    (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', None),
    (b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}', None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing', 1),
    (b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","id":1,"method":"ping"}', None),  # a UTF-8 BOM
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"\\ud800"}}', 1),
    (b"[" * 200 + b"]" * 200, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b'{"a":' * 150 + b"1" + b"}" * 151, 1),
]


@pytest.mark.e2e
def test_malformed_input_is_answered_with_one_error_each_and_the_session_continues() -> None:
    with running_server(FAST) as server:
        server.initialize()
        for index, (line, expected_id) in enumerate(MALFORMED):
            server.send_raw(line + b"\n")
            server.send(ping(f"after-{index}"))
            messages = server.recv_through(f"after-{index}")
            assert len(messages) == 2, (line, messages)
            error = messages[0]
            assert set(error) == {"jsonrpc", "id", "error"}, line
            assert error["id"] == expected_id, line
            assert error["error"]["code"] in (-32700, -32600), line
            assert isinstance(error["error"]["message"], str)
        finish(server)


@pytest.mark.e2e
def test_crlf_blank_lines_and_split_writes() -> None:
    with running_server(FAST) as server:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
        server.send_raw(b"\n\r\n   \n\t\r\n" + json.dumps(init).encode() + b"\r\n")
        server.send_raw(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\r\n\r\n')
        # One message split across writes, its CR and LF in separate writes.
        message = json.dumps(ping(2)).encode()
        for part in (message[:5], message[5:20], message[20:], b"\r", b"\n"):
            server.send_raw(part)
            time.sleep(0.02)
        # Several messages in one write, mixed terminators.
        server.send_raw(frame(ping(3)) + json.dumps(ping(4)).encode() + b"\r\n" + frame(ping(5)))
        assert ids(server.recv_through(5)) == [1, 2, 3, 4, 5]
        # A form feed or vertical tab is not JSON whitespace: the line is not blank.
        server.send_raw(b"\x0c\n")
        assert server.recv()["error"]["code"] == -32700
        server.send_raw(b"\x0b\n")
        assert server.recv()["error"]["code"] == -32700
        assert server.request("ping")["result"] == {}
        finish(server)


def padded_ping(request_id: int, total_bytes: int) -> bytes:
    """A valid ping frame of exactly `total_bytes` bytes (without its newline)."""
    head = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"_meta":{"pad":"' % request_id
    tail = b'"}}}'
    return head + b" " * (total_bytes - len(head) - len(tail)) + tail


def euro_ping(request_id: int, count: int) -> bytes:
    """A ping padded with `count` three-byte characters."""
    head = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"_meta":{"pad":"' % request_id
    return head + "\u20ac".encode() * count + b'"}}}'


@pytest.mark.e2e
def test_frame_ceiling_counts_bytes_and_the_session_continues() -> None:
    with running_server(FAST) as server:
        server.initialize()
        # Exactly at the ceiling: answered.
        assert len(padded_ping(1, MAX_FRAME_BYTES)) == MAX_FRAME_BYTES
        server.send_raw(padded_ping(1, MAX_FRAME_BYTES) + b"\n")
        assert server.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        # At the ceiling plus a CR terminator: still answered.
        server.send_raw(padded_ping(2, MAX_FRAME_BYTES) + b"\r\n")
        assert server.recv()["id"] == 2
        # One byte over: refused, with the limit in data, and the id cannot be trusted.
        server.send_raw(padded_ping(3, MAX_FRAME_BYTES + 1) + b"\n")
        assert server.recv() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid request: the message exceeds the frame limit",
                "data": {"max_frame_bytes": MAX_FRAME_BYTES},
            },
        }
        # Multi-byte text: fewer characters than the ceiling, more bytes than it.
        overhead = len(euro_ping(4, 0))
        over = euro_ping(4, (MAX_FRAME_BYTES - overhead) // 3 + 1)
        assert len(over) > MAX_FRAME_BYTES
        assert len(over.decode()) < MAX_FRAME_BYTES // 2
        server.send_raw(over + b"\n")
        assert server.recv()["error"]["data"] == {"max_frame_bytes": MAX_FRAME_BYTES}
        # The same text just under the ceiling in bytes: answered.
        under = euro_ping(5, (MAX_FRAME_BYTES - overhead) // 3)
        assert len(under) <= MAX_FRAME_BYTES
        server.send_raw(under + b"\n")
        assert server.recv()["id"] == 5
        finish(server)


@pytest.mark.e2e
def test_unterminated_oversized_line_at_end_of_input_is_reported_once() -> None:
    with running_server(FAST) as server:
        server.initialize()
        server.send_raw(b"z" * (MAX_FRAME_BYTES + 100))
        server.close_stdin()
        messages = read_to_eof(server)
        assert [message["error"]["code"] for message in messages] == [-32600]
        assert messages[0]["id"] is None
        assert server.wait() == 0


@pytest.mark.e2e
def test_a_line_many_mib_long_is_discarded_as_it_streams() -> None:
    total = 48 * MIB
    chunk = b"x" * (64 * 1024)
    with running_server(FAST) as server:
        server.initialize()
        # Warm the frame path with one line just over the ceiling, then take the baseline.
        server.send_raw(b"y" * (MAX_FRAME_BYTES + 10) + b"\n")
        assert server.recv()["error"]["code"] == -32600
        baseline = server.status_kib("VmHWM")
        server.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"')
        sent = 0
        while sent < total:
            server.send_raw(chunk)
            sent += len(chunk)
        server.send_raw(b'"}}\n')
        server.send(ping("after"))
        messages = server.recv_through("after", timeout=30)
        assert [message.get("error", {}).get("code") for message in messages] == [-32600, None]
        peak = server.status_kib("VmHWM")
        assert peak - baseline < RSS_GROWTH_LIMIT_KIB, (baseline, peak)
        assert server.request("ping")["result"] == {}
        finish(server)


@pytest.mark.e2e
def test_stdout_carries_only_json_lines_even_at_debug_level() -> None:
    env = {**FAST, "MCP_SERVER_SUITE_LOG_LEVEL": "DEBUG", "MCP_UNKNOWN_VARIABLE": "1"}
    with running_server(env, stdout=subprocess.PIPE) as server:
        server.send_raw(b"garbage\n")
        assert server.recv()["error"]["code"] == -32700
        server.initialize()
        server.request("tools/list")
        server.call_tool("system_metrics", {})
        server.call_tool("system_metrics", {"include_disk": 3})
        server.call_tool("nope", {})
        server.send(call("cancel-me"))
        server.send(cancel("cancel-me"))
        server.send_raw(b"x" * (MAX_FRAME_BYTES + 1) + b"\n")
        server.close_stdin()
        assert server.wait() == 0
        stdout = server.process.stdout
        assert stdout is not None
        raw = server._buffer + stdout.read()
        lines = raw.split(b"\n")
        assert lines[-1] == b""
        for line in lines[:-1]:
            message = json.loads(line)
            assert message["jsonrpc"] == "2.0"
            assert line.isascii()
        # Logging happened, on stderr.
        assert "DEBUG" in server.stderr or "INFO" in server.stderr
        assert "MCP_UNKNOWN_VARIABLE" in server.stderr


# --------------------------------------------------------------------------------------------
# Signals and end of input
# --------------------------------------------------------------------------------------------

DRAIN_SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.e2e
@pytest.mark.parametrize("signum", DRAIN_SIGNALS, ids=lambda s: s.name)
def test_first_signal_drains_the_call_in_flight_then_exits_zero(signum: signal.Signals) -> None:
    with running_server(slow(1.0)) as server:
        server.initialize()
        server.send(call(1))
        server.send(ping(2))
        assert ids(server.recv_through(2)) == [2]  # the call has been read and started
        server.signal(signum)
        server.wait_for_stderr(f"received {signum.name}, draining")
        # Reading has stopped: this request is never answered.
        server.send(ping(3))
        messages = read_to_eof(server)
        assert ids(messages) == [1]
        assert messages[0]["result"]["isError"] is False
        assert server.wait() == 0
        assert_clean_stderr(server)


@pytest.mark.e2e
@pytest.mark.parametrize("signum", DRAIN_SIGNALS, ids=lambda s: s.name)
def test_second_signal_cancels_calls_in_flight_and_exits_zero(signum: signal.Signals) -> None:
    # One slot: call 1 samples in a worker thread, call 2 waits for the slot. Draining both
    # would take two samples; the second signal must drop both responses instead.
    with running_server(slow(1, MCP_MAX_CONCURRENT_TOOLS="1")) as server:
        server.initialize()
        server.send(call(1))
        server.send(call(2))
        server.send(ping(3))
        assert ids(server.recv_through(3)) == [3]
        server.signal(signum)
        server.wait_for_stderr("draining")
        server.signal(signum)
        cancelled_at = time.monotonic()
        assert read_to_eof(server) == []
        assert server.wait() == 0
        # Bounded by the one sample already running in a thread (Python cannot interrupt a
        # thread), and well short of the 5 s grace period plus a second sample.
        assert time.monotonic() - cancelled_at < 4.5
        assert "cancelling calls" in server.stderr
        assert_clean_stderr(server)


@pytest.mark.e2e
def test_signal_when_idle_exits_zero() -> None:
    with running_server(FAST) as server:
        server.initialize()
        server.signal(signal.SIGTERM)
        assert read_to_eof(server) == []
        assert server.wait() == 0


@pytest.mark.e2e
def test_end_of_input_drains_the_call_in_flight_then_exits_zero() -> None:
    with running_server(slow(1)) as server:
        server.initialize()
        server.send(call(1))
        server.send(ping(2))
        assert ids(server.recv_through(2)) == [2]
        server.close_stdin()
        messages = read_to_eof(server)
        assert ids(messages) == [1]
        assert messages[0]["result"]["isError"] is False
        assert server.wait() == 0
        assert_clean_stderr(server)


@pytest.mark.e2e
@pytest.mark.parametrize("failing_write", ["inline", "call"])
def test_stdout_closed_by_the_client_ends_the_session(failing_write: str) -> None:
    with running_server(slow(0.5)) as server:
        server.initialize()
        stdout = server.process.stdout
        assert stdout is not None
        stdout.close()
        # The next write fails, from the read loop (a ping's answer) or from a call's own
        # task: either way the server treats the client as gone and exits 0.
        with contextlib.suppress(BrokenPipeError):
            server.send(call(1))
            if failing_write == "inline":
                server.send(ping(2))
        assert server.wait() == 0
        assert_clean_stderr(server)


# --------------------------------------------------------------------------------------------
# A client that stops reading
# --------------------------------------------------------------------------------------------


def bytes_read_by(server: ServerProcess) -> int:
    """Bytes the server has read through read(2) and friends, from /proc/<pid>/io."""
    for line in Path(f"/proc/{server.pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "rchar":
            return int(value)
    raise KeyError("rchar")


@pytest.mark.e2e
def test_client_that_stops_reading_stops_the_server_reading() -> None:
    # Pings are answered inline: with stdout full, the read loop waits, stdin fills, and
    # writes to it start failing with EAGAIN. The bound is far above what the pipes and
    # the server's 256 KiB output buffer can absorb.
    bound = 32 * MIB
    size = 64  # pings per write: 64 of at most 52 bytes is under PIPE_BUF, so writes are atomic
    quiet_for = 1.0  # the server has stopped when it reads nothing for this long
    with running_server(FAST) as server:
        server.initialize()
        baseline_rss = server.status_kib("VmRSS")
        stdin = server.process.stdin
        assert stdin is not None
        fd = stdin.fileno()
        os.set_blocking(fd, False)
        written = 0  # pings accepted by the pipe, ids 1..written
        sent_bytes = 0
        last_read = (bytes_read_by(server), time.monotonic())
        try:
            while sent_bytes < bound:
                batch = b"".join(frame(ping(n)) for n in range(written + 1, written + 1 + size))
                try:
                    os.write(fd, batch)
                except BlockingIOError:
                    size = 1  # fill what room is left, one ping at a time
                    # A full pipe alone proves nothing: a busy server can lag behind. It has
                    # stopped when its read count stays still while the pipe stays full.
                    consumed = bytes_read_by(server)
                    if consumed != last_read[0]:
                        last_read = (consumed, time.monotonic())
                    elif time.monotonic() - last_read[1] > quiet_for:
                        break
                    time.sleep(0.02)
                    continue
                written += size
                sent_bytes += len(batch)
            assert sent_bytes < bound, "the server kept reading although nobody read its output"
            # It stays stalled, and its memory stays bounded while it is.
            time.sleep(0.3)
            assert bytes_read_by(server) == last_read[0]
            with pytest.raises(BlockingIOError):
                os.write(fd, frame(ping(written + 1)))
            assert server.status_kib("VmRSS") - baseline_rss < RSS_GROWTH_LIMIT_KIB
        finally:
            os.set_blocking(fd, True)
        # Resume reading: every ping is answered, in order.
        out_fd = server.process.stdout.fileno()  # type: ignore[union-attr]
        answered = 0
        pending = server._buffer
        server._buffer = b""
        deadline = time.monotonic() + 60
        while answered < written:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {answered} of {written} pings were answered")
            lines = pending.split(b"\n")
            pending = lines.pop()
            for line in lines:
                answered += 1
                assert json.loads(line) == {"jsonrpc": "2.0", "id": answered, "result": {}}
            if answered < written:
                pending += os.read(out_fd, 1 << 16)
        assert pending == b""
        assert written > 1000
        assert server.request("ping")["result"] == {}
        finish(server)


def cpu_seconds_of(server: ServerProcess) -> float:
    """User plus system CPU time the server has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nul_read(request_id: int, max_bytes: int = MIB) -> bytes:
    return frame(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "sandbox_fs_read",
                "arguments": {"relative_path": "nul.txt", "max_bytes": max_bytes},
            },
        }
    )


def wait_until_quiet(server: ServerProcess, within: float = 30.0) -> None:
    """Wait until the server uses less than 0.1 s of CPU in a second: it works for nobody."""
    deadline = time.monotonic() + within
    before = cpu_seconds_of(server)
    while True:
        time.sleep(1.0)
        now = cpu_seconds_of(server)
        if now - before < 0.1:
            return
        before = now
        assert time.monotonic() < deadline, "the server kept working for nobody"


@pytest.mark.e2e
def test_no_tool_starts_while_the_responses_waiting_are_at_their_bound(tmp_path: Path) -> None:
    # Three slots and fifteen reads of 295 KiB of NUL bytes (3.75 MiB responses once escaped)
    # in one write, as many as the limiter's queue takes, nobody reading. Nine results pass
    # the 32 MiB bound (eight stay 2 MiB below it); the two other calls in a slot at that
    # moment may have passed the gate already, and whatever takes a slot after it stops at
    # the gate before its tool runs. The audit trail, which records each call as its reply is
    # decided, shows it: nine to eleven tools ran while the client did not read, and all
    # fifteen once it reads. Without the gate all fifteen would run and their responses wait.
    size = 295 * 1024
    data = tmp_path / "data"
    data.mkdir()
    (data / "nul.txt").write_bytes(b"\0" * size)
    log = tmp_path / "audit.jsonl"
    env = {
        "MCP_SAFE_DATA_DIR": str(data),
        "MCP_METRICS_ENABLED": "false",
        "MCP_MAX_CONCURRENT_TOOLS": "3",
        "MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS": "60",
        "MCP_AUDIT_LOG": str(log),
    }
    calls = 15

    def ran() -> list[tuple[int, str]]:
        records = [json.loads(line) for line in log.read_text().splitlines()]
        return [(int(record["request_id"]), str(record["outcome"])) for record in records]

    with running_server(env) as server:
        server.initialize()
        server.send_raw(b"".join(nul_read(n, size) for n in range(calls)))
        wait_until_quiet(server)
        assert 9 <= len(ran()) <= 11, ran()
        assert {outcome for _, outcome in ran()} == {"ok"}
        for _ in range(calls):
            reply = server.recv(timeout=60)
            assert reply["result"]["structuredContent"]["bytes_read"] == size
        assert server.request("ping")["result"] == {}
        finish(server)
    assert sorted(request_id for request_id, _ in ran()) == list(range(calls))


@pytest.mark.e2e
def test_the_inline_shortcut_stands_aside_while_the_responses_waiting_are_at_their_bound(
    tmp_path: Path,
) -> None:
    # Reads of 64 KiB of a cached file are answered at once, on the event loop (832 KiB
    # responses of escaped NUL bytes). Eighty of them in one write, nobody reading: forty
    # responses pass the 32 MiB bound, and from then on the shortcut stands aside, so each
    # further call takes the full path and stops at the gate, or waits for a slot held there.
    size = 64 * 1024
    data = tmp_path / "data"
    data.mkdir()
    (data / "nul.txt").write_bytes(b"\0" * size)
    log = tmp_path / "audit.jsonl"
    env = {
        "MCP_SAFE_DATA_DIR": str(data),
        "MCP_METRICS_ENABLED": "false",
        "MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS": "60",
        "MCP_AUDIT_LOG": str(log),
    }
    calls = 80

    def ran() -> int:
        return len(log.read_text().splitlines())

    with running_server(env) as server:
        server.initialize()
        # The first read puts the file and its name in the caches the shortcut relies on.
        server.call_tool("sandbox_fs_read", {"relative_path": "nul.txt", "max_bytes": size})
        server.send_raw(b"".join(nul_read(n, size) for n in range(calls)))
        wait_until_quiet(server)
        assert 1 + 40 <= ran() <= 1 + 42
        for _ in range(calls):
            reply = server.recv(timeout=60)
            assert reply["result"]["structuredContent"]["bytes_read"] == size
        finish(server)
    assert ran() == 1 + calls


@pytest.mark.e2e
def test_large_results_for_a_client_that_does_not_read_are_bounded(tmp_path: Path) -> None:
    # 40 reads of 1 MiB of NUL bytes in one write: responses of 4 MiB each (the read tool cuts
    # a response there), 160 MiB in all, which a server that kept what it could not write
    # would hold.
    (tmp_path / "nul.txt").write_bytes(b"\0" * MIB)
    env = {"MCP_SAFE_DATA_DIR": str(tmp_path), "MCP_METRICS_ENABLED": "false"}
    calls = 40
    with running_server(env) as server:
        server.initialize()
        server.send_raw(b"".join(nul_read(n) for n in range(calls)))
        # With nobody reading, the server goes quiet: the calls in the slots stop at the
        # output gate, so it uses no CPU for answers nobody takes.
        wait_until_quiet(server)
        assert server.status_kib("VmHWM") < 128 * 1024
        # Read everything: each call gets its result, or an in-band retryable refusal.
        for _ in range(calls):
            result = server.recv(timeout=60)["result"]
            if result["isError"]:
                problem = json.loads(result["content"][0]["text"])
                assert problem["metadata"]["retryable"] is True, problem
            else:
                read = result["structuredContent"]
                assert 0 < read["bytes_read"] <= MIB
                assert read["bytes_read"] == MIB or read["truncated"]
        assert server.status_kib("VmHWM") < 128 * 1024
        # And the session answers again at once.
        assert server.request("ping")["result"] == {}
        finish(server)


@pytest.mark.e2e
def test_results_that_would_hold_too_much_are_refused_retryably(tmp_path: Path) -> None:
    # 24 slots, 24 reads of 1 MiB of random bytes decoded as latin-1: every reply is up to
    # 4 MiB of escapes that do not compress (about 2 MiB each once held compressed), and all
    # 24 start before any is written. Once the responses waiting hold 32 MiB (sixteen of
    # them), the successful results still finishing are replaced by a small retryable
    # refusal instead of being held: about eight are. The size of each reply, not timing,
    # decides how many fit, so a third more calls than fit is margin enough.
    (tmp_path / "noise.txt").write_bytes(os.urandom(MIB))
    calls = 24
    env = {
        "MCP_SAFE_DATA_DIR": str(tmp_path),
        "MCP_METRICS_ENABLED": "false",
        "MCP_MAX_CONCURRENT_TOOLS": str(calls),
    }
    arguments = {"relative_path": "noise.txt", "max_bytes": MIB, "encoding": "latin-1"}
    burst = b"".join(
        frame(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "sandbox_fs_read", "arguments": arguments},
            }
        )
        for n in range(calls)
    )
    with running_server(env) as server:
        server.initialize()
        server.send_raw(burst)
        # Every call runs to its end with nobody reading; the server then goes quiet.
        wait_until_quiet(server)
        results = dropped = 0
        for _ in range(calls):
            result = server.recv(timeout=60)["result"]
            if result["isError"]:
                problem = json.loads(result["content"][0]["text"])
                assert problem["metadata"] == {"retryable": True}, problem
                assert "was ready, but earlier responses still wait" in problem["detail"]
                dropped += 1
            else:
                read = result["structuredContent"]
                assert 0 < read["bytes_read"] <= MIB
                assert read["bytes_read"] == MIB or read["truncated"]
                results += 1
        assert results > 0
        assert dropped > 0
        assert "dropped a" in server.stderr
        assert server.request("ping")["result"] == {}
        finish(server)


# --------------------------------------------------------------------------------------------
# Leaks
# --------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_no_file_descriptor_leaks_over_hundreds_of_calls() -> None:
    with running_server(FAST) as server:
        server.initialize()
        # Warm up: every worker thread, lazy import and cache the calls below will use.
        for request_id in range(16):
            server.send(call(f"warm-{request_id}"))
        for _ in range(16):
            server.recv()
        before = server.open_fds()
        for batch in range(20):
            for n in range(16):
                server.send(call(f"{batch}-{n}", {"include_disk": n % 2 == 0}))
            server.send(call(f"{batch}-refused", {"nope": 1}))
            server.send(call(f"{batch}-cancelled"))
            server.send(cancel(f"{batch}-cancelled"))
            server.send_raw(b"{broken\n")
            server.send(ping(f"{batch}-ping"))
            server.recv_through(f"{batch}-ping")
        server.send(ping("last"))
        # Drain every outstanding response (cancelled calls may or may not have answered).
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                server.recv(0.5)
            except TimeoutError:
                break
        assert server.open_fds() == before
        finish(server)


def _in_process_client(
    request_fd: int, response_fd: int, requests: list[bytes], received: list[bytes]
) -> None:
    """Write every request, then end the input; read responses until the server closes."""
    with os.fdopen(request_fd, "wb", buffering=0) as request_pipe:
        for data in requests:
            request_pipe.write(data)
    with os.fdopen(response_fd, "rb", buffering=0) as response_pipe:
        received.extend(response_pipe.read().splitlines())


async def _serve_one_session(requests: list[bytes], received: list[bytes]) -> set[str]:
    settings = Settings(metrics_cpu_sample_seconds=0.2)
    registry = build_registry(settings)
    guardrails = Guardrails(limiter=ConcurrencyLimiter(2), acquire_timeout=5.0)
    dispatcher = Dispatcher(registry, server_version="0.0.0-test")
    request_read, request_write = os.pipe()
    response_read, response_write = os.pipe()
    client = threading.Thread(
        target=_in_process_client,
        args=(request_write, response_read, requests, received),
        name="test-client",
    )
    client.start()
    try:
        await serve(dispatcher, guardrails, in_fd=request_read, out_fd=response_write, grace=5.0)
    finally:
        await registry.aclose()
    current = asyncio.current_task()
    return {task.get_name() for task in asyncio.all_tasks() if task is not current}


def _fd_table() -> dict[str, str]:
    table = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            table[name] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the directory listing's own descriptor
            continue
    return table


def test_serve_in_process_leaves_no_task_thread_descriptor_or_handler_behind() -> None:
    # serve installs SIGINT/SIGTERM handlers on the running loop: this needs the main thread.
    assert threading.current_thread() is threading.main_thread()
    requests = [
        frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}),
        frame({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        *(frame(call(n)) for n in range(2, 8)),  # more calls than slots: some wait
        frame(cancel(3)),  # cancelled while running
        frame(cancel(7)),  # cancelled while waiting for a slot
        b"{broken\n",
        frame(ping(8)),
        frame(call(9)),  # still in flight at EOF: drained
    ]
    # Worker threads are process-wide; earlier in-process tests may have left idle ones.
    stop_workers()
    fds_before = _fd_table()
    threads_before = threading.active_count()
    # A closing event loop gives SIGINT Python's own handler back, whatever it was before:
    # a test process started in the background inherits SIGINT ignored, so the session
    # starts from Python's default here, as it does in any interpreter started normally.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    handlers_before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    received: list[bytes] = []

    try:
        leftover_tasks = asyncio.run(_serve_one_session(requests, received))
    finally:
        handlers_after = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
        signal.signal(signal.SIGINT, inherited)

    assert leftover_tasks == set()
    for thread in threading.enumerate():
        if thread.name == "test-client":
            thread.join(10)
    assert threading.active_count() == threads_before, [t.name for t in threading.enumerate()]
    assert _fd_table() == fds_before
    assert handlers_after == handlers_before
    answered = [json.loads(line).get("id") for line in received]
    assert sorted(answered, key=str) == sorted([1, 2, 4, 5, 6, 8, 9, None], key=str)


# --------------------------------------------------------------------------------------------
# Command line and configuration
# --------------------------------------------------------------------------------------------


# The password in the DSNs below: any output that holds it has leaked the secret.
CANARY = "hunter2"


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "dev", "-m", "mcp_server_suite", *args],
        env=base_environment(env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.e2e
def test_invalid_configuration_exits_78_with_one_line_naming_the_variable() -> None:
    done = run_cli(env={"MCP_SQL_POOL_MAX_SIZE": "abc"})
    assert done.returncode == 78
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "MCP_SQL_POOL_MAX_SIZE" in lines[0]
    assert "abc" in lines[0]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "dsn",
    [
        f"mysql://u:{CANARY}@h/db",
        f"postgresql://u:{CANARY}@h/db with space",
        f"postgresql://u:{CANARY}@h/db\x07",
    ],
)
def test_invalid_dsn_is_refused_without_showing_it(dsn: str) -> None:
    done = run_cli(
        "--check-config", env={"MCP_SQL_DSN": dsn, "MCP_SERVER_SUITE_LOG_LEVEL": "DEBUG"}
    )
    assert done.returncode == 78
    assert "MCP_SQL_DSN" in done.stderr
    assert CANARY not in done.stdout + done.stderr


@pytest.mark.e2e
def test_check_config_never_prints_the_dsn(tmp_path: Path) -> None:
    env = {"MCP_SQL_DSN": f"postgresql://u:{CANARY}@h/db", "MCP_SERVER_SUITE_LOG_LEVEL": "DEBUG"}
    done = run_cli("--check-config", "--offline", env=env)
    assert CANARY not in done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
    assert "read_only_sql: enabled" in done.stdout
    # Online, the check connects (no server listens in tmp_path) and reports that it cannot,
    # without the DSN.
    env["MCP_SQL_DSN"] = f"postgresql://u:{CANARY}@/db?host={tmp_path}"
    done = run_cli("--check-config", env=env)
    assert CANARY not in done.stdout + done.stderr
    assert done.returncode == 1
    assert "\ndatabase: cannot connect: " in done.stdout


@pytest.mark.e2e
def test_dsn_never_reaches_output_even_when_the_database_fails(tmp_path: Path) -> None:
    # No PostgreSQL listens in tmp_path: the call fails while connecting, the path where a
    # driver's error message is most likely to carry the connection string.
    env = {
        "MCP_SQL_DSN": f"postgresql://u:{CANARY}@/db?host={tmp_path}",
        "MCP_SQL_CONNECT_TIMEOUT": "0.5",
        "MCP_SERVER_SUITE_LOG_LEVEL": "DEBUG",
    }
    with running_server(env) as server:
        server.initialize()
        names = [tool["name"] for tool in server.request("tools/list")["result"]["tools"]]
        assert "read_only_sql" in names
        response = server.call_tool("read_only_sql", {"query": "SELECT 1"})
        # The database's own failure is the call's answer in-band, never the server's crash.
        assert response["result"]["isError"] is True
        problem = json.loads(response["result"]["content"][0]["text"])
        assert problem["code"] == "MCP_INTERNAL_ERROR"
        assert problem["metadata"] == {"cause": "connection", "retryable": True}
        server.close_stdin()
        assert server.wait() == 0
        assert CANARY not in json.dumps(response)
        assert CANARY not in server.stderr
        assert "PostgreSQL could not be reached" in server.stderr
        assert "Traceback" not in server.stderr


@pytest.mark.e2e
def test_help_version_and_check_config_output() -> None:
    help_run = run_cli("--help")
    assert help_run.returncode == 0
    assert help_run.stderr == ""
    assert help_run.stdout.startswith(f"usage: {SERVER_NAME}")
    for text in ("--check-config", "--version", "MCP_SQL_DSN", "MCP_SAFE_DATA_DIR", "78"):
        assert text in help_run.stdout

    version_run = run_cli("--version")
    assert version_run.returncode == 0
    assert version_run.stdout == f"{SERVER_NAME} {__version__}\n"

    check_run = run_cli("--check-config")
    assert check_run.returncode == 0, check_run.stderr
    assert check_run.stdout.splitlines()[0] == "configuration:"
    assert check_run.stdout.splitlines()[-1] == "verdict: valid"
    for text in (
        "system_metrics: enabled",
        "read_only_sql: disabled",
        "sandbox_fs_read: disabled",
        "16 concurrent calls",
    ):
        assert text in check_run.stdout

    bad_option = run_cli("--no-such-option")
    assert bad_option.returncode == 2
    assert bad_option.stdout == ""


# --------------------------------------------------------------------------------------------
# Other kinds of standard streams
# --------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_regular_files_as_stdin_and_stdout(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    responses = tmp_path / "responses.jsonl"
    requests.write_bytes(
        frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()})
        + frame({"jsonrpc": "2.0", "method": "notifications/initialized"})
        + frame({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        + frame(call(3))
        + b"{broken\n"
        + frame(ping(4))
        + json.dumps(call(5)).encode()  # no final newline: still a frame at EOF
    )
    with requests.open("rb") as stdin, responses.open("wb") as stdout:
        server = ServerProcess(FAST, stdin=stdin.fileno(), stdout=stdout.fileno())
    try:
        assert server.wait(30) == 0
    finally:
        server.kill()
    messages = [json.loads(line) for line in responses.read_bytes().splitlines()]
    assert sorted(ids(messages), key=str) == sorted([1, 2, 3, 4, 5, None], key=str)
    by_id = {message["id"]: message for message in messages}
    assert by_id[3]["result"]["isError"] is False
    assert by_id[5]["result"]["isError"] is False
    assert by_id[None]["error"]["code"] == -32700


@pytest.mark.e2e
def test_dev_null_as_stdin_ends_the_session_at_once() -> None:
    # systemd's StandardInput=null and `server < /dev/null` give a character device that
    # epoll refuses; the server must see end of input, not wait forever.
    server = ServerProcess(FAST, stdin=subprocess.DEVNULL)
    try:
        assert server.wait(20) == 0
        stdout = server.process.stdout
        assert stdout is not None
        assert stdout.read() == b""
        assert_clean_stderr(server)
    finally:
        server.kill()


def _recv_socket_line(sock: socket.socket, buffer: bytearray, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    while b"\n" not in buffer:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError(bytes(buffer))
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


@pytest.mark.e2e
def test_one_connected_socket_as_stdin_and_stdout() -> None:
    # The shape of systemd socket activation with Accept=true: the connection is both
    # standard input and standard output.
    client, served = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client:
        try:
            server = ServerProcess(slow(0.3), stdin=served.fileno(), stdout=served.fileno())
        finally:
            served.close()
        try:
            buffer = bytearray()
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": initialize_params(),
            }
            client.sendall(
                frame(init) + frame({"jsonrpc": "2.0", "method": "notifications/initialized"})
            )
            assert json.loads(_recv_socket_line(client, buffer))["id"] == 1
            client.sendall(frame(call(2)))
            # Half-close: no more requests, but the answer to the call must still arrive.
            client.shutdown(socket.SHUT_WR)
            response = json.loads(_recv_socket_line(client, buffer))
            assert response["id"] == 2
            assert response["result"]["isError"] is False
            with pytest.raises(EOFError):
                _recv_socket_line(client, buffer)
            assert server.wait() == 0
            assert_clean_stderr(server)
        finally:
            server.kill()
