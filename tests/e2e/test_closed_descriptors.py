"""A launcher that leaves a standard descriptor closed (issue 21, item 3).

A closed descriptor's number is the first one `open` hands out, and the server opens the
sandbox root and the audit log at start-up: with stdout closed and the trail in a file,
protocol responses were appended to the audit file (and records went to stderr); with the
sandbox configured, start-up crashed (exit 1); with stderr closed and
`MCP_AUDIT_REQUIRED=true`, the start-up check passed (descriptor 2 was the sandbox root) and
every call was refused. Each closed descriptor now reads or writes /dev/null, and what the
README says is refused is refused at start-up, exit 78.

The server is started through `sh -c 'exec ... N>&-'`, which closes the descriptor just
before the interpreter starts, as a launcher would.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import running_server

pytestmark = pytest.mark.e2e


def launched_with_closed(*fds: int) -> list[str]:
    closing = " ".join(f"{fd}>&-" if fd else "<&-" for fd in fds)
    return [
        "sh",
        "-c",
        f'exec "$@" {closing}',
        "sh",
        sys.executable,
        "-X",
        "dev",
        "-m",
        "mcp_server_suite",
    ]


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "launcher-test", "version": "1"},
    },
}


def read(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "sandbox_fs_read", "arguments": {"relative_path": "hello.txt"}},
    }


def descriptors(pid: int) -> dict[int, str]:
    fds: dict[int, str] = {}
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            fds[int(entry.name)] = os.readlink(entry)
        except FileNotFoundError:  # closed between listing and reading
            continue
    return fds


def wait_until_open(pid: int, *paths: str) -> dict[int, str]:
    # The sandbox root and the audit log are opened at start-up, after the descriptors are
    # guarded.
    deadline = time.monotonic() + 10
    while True:
        fds = descriptors(pid)
        if set(paths) <= set(fds.values()):
            return fds
        assert time.monotonic() < deadline, fds
        time.sleep(0.02)


def test_a_closed_stdout_never_sends_frames_into_the_audit_file(
    tmp_path: Path, sandbox: str
) -> None:
    log = tmp_path / "audit.jsonl"
    env = {"MCP_AUDIT_LOG": str(log), "MCP_SAFE_DATA_DIR": sandbox}
    with running_server(env, command=launched_with_closed(1), stdout=None) as server:
        fds = wait_until_open(server.pid, sandbox, str(log))
        # What start-up opened lies above the standard descriptors, and the protocol's output
        # is the /dev/null that filled the closed stdout (descriptor 1 now points at stderr).
        assert {fds[fd] for fd in fds if fd > 2} >= {sandbox, str(log), os.devnull}
        assert fds[1] == fds[2] != str(log)
        server.send_raw(frame(INITIALIZE) + frame(read(1)) + frame(read(2)))
        server.close_stdin()
        assert server.wait() == 0, server.stderr
    lines = log.read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [1, 2]
    assert all(line.startswith('{"audit":"tools/call"') for line in lines)
    assert "Traceback" not in server.stderr


@pytest.mark.parametrize("closed", [(0,), (0, 1, 2), (0, 2)], ids=str)
def test_a_closed_stdin_ends_the_session_at_once_and_cleanly(
    sandbox: str, closed: tuple[int, ...]
) -> None:
    env = {"MCP_SAFE_DATA_DIR": sandbox}
    with running_server(
        env, command=launched_with_closed(*closed), stdin=None, stdout=None
    ) as server:
        assert server.wait() == 0, server.stderr
    assert "Traceback" not in server.stderr


def test_a_closed_stderr_leaves_the_session_whole(sandbox: str) -> None:
    # The trail on stderr, not required: records go to /dev/null, answers to the client.
    env = {"MCP_SAFE_DATA_DIR": sandbox, "MCP_SERVER_SUITE_LOG_LEVEL": "DEBUG"}
    with running_server(env, command=launched_with_closed(2)) as server:
        server.initialize()
        fds = wait_until_open(server.pid, sandbox)
        assert fds[2] == os.devnull
        for _ in range(3):
            result = server.call_tool("sandbox_fs_read", {"relative_path": "hello.txt"})
            assert result["result"]["isError"] is False, result
        server.close_stdin()
        assert server.wait() == 0
    assert server.stderr == ""


@pytest.mark.parametrize("with_sandbox", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_required_trail_on_a_closed_stderr_is_refused_at_start_up(
    sandbox: str, with_sandbox: bool
) -> None:
    env = {"MCP_AUDIT_REQUIRED": "true"}
    if with_sandbox:
        env["MCP_SAFE_DATA_DIR"] = sandbox
    with running_server(env, command=launched_with_closed(2)) as server:
        assert server.wait() == 78
        assert server.process.stdout is not None
        assert server.process.stdout.read() == b""
