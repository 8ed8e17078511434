"""The real server as a subprocess, spoken to in NDJSON over pipes.

`ServerProcess` starts `python -X dev -m mcp_server_suite` with an explicit environment (only
what a test passes, plus what the interpreter and coverage need), reads stdout with
timeouts so a hung server fails a test instead of hanging it, and collects stderr on a
thread, or, as a client that ignores stderr does, leaves it unread (`stderr_unread`) in a pipe
shrunk to one page until the test starts reading it (`read_stderr`).
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import selectors
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "HANDSHAKE_VERSIONS",
    "REPO_ROOT",
    "STDERR_PIPE_BYTES",
    "ServerProcess",
    "base_environment",
    "initialize_params",
    "running_server",
]

REPO_ROOT = Path(__file__).resolve().parents[2]

# Each test waits at most this long for one line; the server answers in milliseconds, so
# only a hang reaches it.
DEFAULT_TIMEOUT_S = 10.0

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

# The stderr pipe of a client that does not read it is shrunk to one page, the least a pipe
# holds, so that a few dozen records fill it.
STDERR_PIPE_BYTES = 4096


def base_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the minimal environment a server subprocess gets.

    Coverage's own variables are passed on so subprocess coverage is measured, and so is
    `PYTHONPATH`, through which a packaging build (such as Nix's) provides the package and its
    dependencies to a bare interpreter. Nothing else of the developer's environment (no
    `MCP_*`) leaks in.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    if extra:
        env.update(extra)
    return env


def initialize_params(version: str = "2025-11-25") -> dict[str, Any]:
    """Return `initialize` params as a minimal, well-behaved client sends them."""
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "test-client", "version": "1.0"},
    }


class ServerProcess:
    """A running server with NDJSON helpers.

    Args:
        env: Variables added to the minimal environment.
        args: Extra command-line arguments.
        dev_mode: Run under `python -X dev` (asyncio debug, resource warnings).
        command: Run this command line instead of the server's own (a launcher that prepares
            the process, then runs the server in it).
        stderr_unread: Leave stderr unread, in a pipe of `STDERR_PIPE_BYTES`, until
            `read_stderr` is called.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        args: tuple[str, ...] = (),
        dev_mode: bool = True,
        stdin: int | None = subprocess.PIPE,
        stdout: int | None = subprocess.PIPE,
        command: list[str] | None = None,
        stderr_unread: bool = False,
    ) -> None:
        if command is None:
            command = [sys.executable]
            if dev_mode:
                command += ["-X", "dev"]
            command += ["-m", "mcp_server_suite", *args]
        self.process = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=base_environment(env),
            cwd=REPO_ROOT,
        )
        self._buffer = b""
        self._stderr: list[bytes] = []
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_read = False
        if stderr_unread and self.process.stderr is not None:
            fcntl.fcntl(self.process.stderr.fileno(), fcntl.F_SETPIPE_SZ, STDERR_PIPE_BYTES)
        else:
            self.read_stderr()
        self._next_id = 1000

    def _drain_stderr(self) -> None:
        stream = self.process.stderr
        if stream is None:  # pragma: no cover - always piped
            return
        for line in iter(stream.readline, b""):
            self._stderr.append(line)

    def read_stderr(self) -> None:
        """Start reading stderr (after leaving it unread): from now on it is collected."""
        if not self._stderr_read:
            self._stderr_read = True
            self._stderr_thread.start()

    def wait_stderr_drained(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until stderr's pipe holds nothing unread, after `read_stderr`.

        Starting to read does not empty the pipe at once: until the reader has caught up, a
        write of the server's may still find it full, and be dropped as it should be. A test
        that needs its next line written waits for this first.

        Raises:
            TimeoutError: The pipe still held data when the time was up.
        """
        stream = self.process.stderr
        if stream is None:  # pragma: no cover - always piped
            return
        pending = array.array("i", [0])
        deadline = time.monotonic() + timeout
        while True:
            fcntl.ioctl(stream.fileno(), termios.FIONREAD, pending)
            if pending[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"stderr still holds {pending[0]} unread bytes")
            time.sleep(0.005)

    @property
    def stderr(self) -> str:
        """Everything the server wrote to stderr so far."""
        return b"".join(self._stderr).decode("utf-8", "replace")

    def send_raw(self, data: bytes) -> None:
        """Write bytes to the server's stdin as they are."""
        stdin = self.process.stdin
        if stdin is None:
            raise RuntimeError("stdin is not a pipe")
        stdin.write(data)
        stdin.flush()

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one message as a line."""
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv_line(self, timeout: float = DEFAULT_TIMEOUT_S) -> bytes:
        """Read one raw line (without its newline) from stdout.

        Raises:
            TimeoutError: No complete line arrived in time.
            EOFError: stdout closed first.
        """
        stdout = self.process.stdout
        if stdout is None:
            raise RuntimeError("stdout is not a pipe")
        buffer = self._buffer
        newline = buffer.find(b"\n")
        if newline < 0:
            # A line of many MiB arrives a pipe's worth at a time: look for its end in each
            # new piece only, and grow one buffer in place, so that reading it stays linear.
            growing = bytearray(buffer)
            fd = stdout.fileno()
            deadline = time.monotonic() + timeout
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                while newline < 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not selector.select(remaining):
                        self._buffer = bytes(growing)
                        raise TimeoutError(f"no line within {timeout} s; stderr:\n{self.stderr}")
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        self._buffer = bytes(growing)
                        raise EOFError(f"stdout closed; stderr:\n{self.stderr}")
                    found = chunk.find(b"\n")
                    if found >= 0:
                        newline = len(growing) + found
                    growing += chunk
            buffer = bytes(growing)
        self._buffer = buffer[newline + 1 :]
        return buffer[:newline]

    def recv(self, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Read and decode one message."""
        message: dict[str, Any] = json.loads(self.recv_line(timeout))
        return message

    def expect_silence(self, seconds: float = 0.3) -> None:
        """Assert that nothing arrives on stdout for `seconds`."""
        try:
            line = self.recv_line(seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected output: {line!r}")

    def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send a request with a fresh id and return its response."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.send(message)
        response = self.recv(timeout)
        if response.get("id") != self._next_id:
            raise AssertionError(f"response to another id: {response}")
        return response

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        """Perform the handshake; return the `initialize` result."""
        response = self.request("initialize", initialize_params(version))
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = response["result"]
        return result

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Call a tool and return the whole response."""
        return self.request("tools/call", {"name": name, "arguments": dict(arguments)})

    def recv_through(
        self, request_id: Any, timeout: float = DEFAULT_TIMEOUT_S
    ) -> list[dict[str, Any]]:
        """Read messages up to and including the first one with `id == request_id`.

        Inline requests are answered in arrival order, so a ping sent after some input
        marks the point by which every inline answer to that input has been written.

        Returns:
            Every message read, the one with the id last.
        """
        deadline = time.monotonic() + timeout
        messages: list[dict[str, Any]] = []
        while True:
            message = self.recv(max(deadline - time.monotonic(), 0.001))
            messages.append(message)
            if message.get("id") == request_id and type(message.get("id")) is type(request_id):
                return messages

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def status_kib(self, field: str) -> int:
        """Read a memory figure (`VmRSS`, `VmHWM`...) of the server from /proc, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
        raise KeyError(field)

    def open_fds(self) -> list[str]:
        """List what the server's open descriptors point at (from /proc/<pid>/fd)."""
        fd_dir = Path(f"/proc/{self.pid}/fd")
        targets = []
        for entry in sorted(fd_dir.iterdir(), key=lambda path: int(path.name)):
            try:
                targets.append(f"{entry.name} -> {os.readlink(entry)}")
            except FileNotFoundError:  # closed between listing and reading
                continue
        return targets

    def wait_for_stderr(self, text: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until `text` appears in the server's stderr.

        Raises:
            TimeoutError: It did not appear in time.
        """
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not in stderr:\n{self.stderr}")
            time.sleep(0.01)

    def close_stdin(self) -> None:
        """Signal end of input."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()

    def signal(self, signum: signal.Signals) -> None:
        """Send a signal to the server."""
        self.process.send_signal(signum)

    def wait(self, timeout: float = DEFAULT_TIMEOUT_S) -> int:
        """Wait for the server to exit and return its status."""
        status = self.process.wait(timeout)
        if self._stderr_thread.is_alive():
            self._stderr_thread.join(timeout)
        return status

    def kill(self) -> None:
        """Stop the server for good, whatever its state."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        if self._stderr_thread.is_alive():
            self._stderr_thread.join(DEFAULT_TIMEOUT_S)
        if self.process.stderr is not None:
            self.process.stderr.close()


@contextmanager
def running_server(env: Mapping[str, str] | None = None, **kwargs: Any) -> Iterator[ServerProcess]:
    """Start a server for the body and always reap it afterwards."""
    server = ServerProcess(env, **kwargs)
    try:
        yield server
    finally:
        server.kill()
