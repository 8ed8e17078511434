"""A session on a terminal that hangs up (issue 21, item 4).

With stdin and stdout a pseudo-terminal whose other side closes, a read gives EIO (and so
does a write). During the handshake or the inline phase that used to escape as an OSError:
a traceback, exit 1; on the event loop the same hang-up ended the session with 0. Every phase
now ends the same way: the end of input, exit 0, no traceback.

The server runs in a session of its own (`start_new_session`), so the terminal is not its
controlling terminal and the hang-up reaches it as EIO, not as SIGHUP, as with a client that
hands it a pty it allocated itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import tty
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_server_suite.core.stdio import DRAIN_GRACE_S
from tests.support.harness import REPO_ROOT, base_environment, initialize_params

pytestmark = pytest.mark.e2e


class TerminalServer:
    """The server with a pty's one side as stdin and stdout; the test holds the other."""

    def __init__(self, env: dict[str, str]) -> None:
        self.client, server = os.openpty()
        tty.setraw(server)
        self.process = subprocess.Popen(
            [sys.executable, "-X", "dev", "-m", "mcp_server_suite"],
            stdin=server,
            stdout=server,
            stderr=subprocess.PIPE,
            env=base_environment(env),
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        os.close(server)
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        os.write(self.client, json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no answer in time"
            if select.select([self.client], [], [], left)[0]:
                self._buffer += os.read(self.client, 1 << 16)
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def hang_up(self) -> None:
        os.close(self.client)
        self.client = -1

    def finish(self) -> tuple[int, str]:
        _, stderr = self.process.communicate(timeout=15)
        return self.process.returncode, stderr.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        if self.client >= 0:
            os.close(self.client)


@pytest.fixture
def terminal(sandbox: str) -> Iterator[TerminalServer]:
    server = TerminalServer(
        {"MCP_SAFE_DATA_DIR": sandbox, "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}
    )
    yield server
    server.kill()


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def open_phase(server: TerminalServer, phase: str) -> None:
    if phase == "handshake":
        # A ping answered: the server reads in the handshake phase when the line hangs up.
        server.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert server.recv()["id"] == 1
        return
    server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()})
    assert server.recv()["id"] == 1
    if phase == "event-loop":
        # A call in a worker thread: the event loop runs from here on.
        server.send(call(2, "system_metrics", {}))
        assert server.recv()["result"]["isError"] is False
    else:
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert server.recv()["id"] == 2


@pytest.mark.parametrize("phase", ["handshake", "inline", "event-loop"])
def test_a_hang_up_ends_the_session_with_0_in_every_phase(
    terminal: TerminalServer, phase: str
) -> None:
    open_phase(terminal, phase)
    time.sleep(0.2)  # the server is back in its read
    terminal.hang_up()
    status, stderr = terminal.finish()
    assert status == 0, stderr
    assert "Traceback" not in stderr


def test_a_hang_up_while_answers_are_written_ends_the_session_with_0(
    terminal: TerminalServer,
) -> None:
    # Requests that ask for more than the terminal holds, then the hang-up: the writes fail
    # (EIO) in the inline phase, which writes to a terminal with blocking writes.
    open_phase(terminal, "inline")
    for request_id in range(100, 400):
        terminal.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    time.sleep(0.3)
    terminal.hang_up()
    status, stderr = terminal.finish()
    assert status == 0, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("phase", ["handshake", "inline", "event-loop"])
def test_a_signal_ends_a_session_whose_terminal_stops_taking_output(
    terminal: TerminalServer, phase: str
) -> None:
    # The client stops reading the terminal: the server's writes to it block, in the blocking
    # phases and on the event loop alike (where a write used to hold the loop, and with it
    # the signal handlers). A signal still ends the session, with 0.
    open_phase(terminal, phase)
    flood = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode() + b"\n"
        for n in range(100, 20_100)
    )

    def write() -> None:
        with contextlib.suppress(OSError):
            os.write(terminal.client, flood)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    # The server has stopped reading: its output is full, so the client's writes block.
    writer.join(1.0)
    assert writer.is_alive()
    signalled = time.monotonic()
    terminal.process.send_signal(signal.SIGTERM)
    status, stderr = terminal.finish()
    assert status == 0, stderr
    assert time.monotonic() - signalled < DRAIN_GRACE_S + 2.5
    assert "Traceback" not in stderr
