"""The raw NDJSON client every benchmark drives its servers with.

One JSON message per line over the child's pipes, with no MCP library in between, so the
figures measure the servers and not a client. It also reads a child's CPU time from /proc.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PROTOCOL_VERSION", "NDJSONClient", "ServerFailed"]

REPO_ROOT = Path(__file__).resolve().parents[1]

PROTOCOL_VERSION = "2025-06-18"


class ServerFailed(RuntimeError):
    """A server answered with an error, the wrong result, or not at all."""


class NDJSONClient:
    """A minimal MCP client: one JSON message per line over the child's pipes.

    Args:
        command: The server's command line.
        env: Its complete environment.
        client_name: The name sent in `clientInfo`.
        protocol_version: The version `initialize` asks for.
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        client_name: str = "bench",
        protocol_version: str = PROTOCOL_VERSION,
    ) -> None:
        self._client_name = client_name
        self._protocol_version = protocol_version
        self.next_id = 0
        self.started = time.monotonic()
        self.initialized_at = 0.0
        # Closed in close(): the file outlives this method by design.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(env),
            cwd=REPO_ROOT,
        )
        if self.process.stdin is None or self.process.stdout is None:
            raise ServerFailed("pipes were not created")
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        self._buffer = bytearray()

    def write(self, data: bytes) -> None:
        """Write bytes to the server's stdin as they are."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one message and its newline."""
        self.write(json.dumps(message).encode() + b"\n")

    def receive(self) -> dict[str, Any]:
        """Read the next response, skipping notifications and server requests."""
        while True:
            newline = self._buffer.find(b"\n")
            while newline < 0:
                chunk = os.read(self._out, 1 << 16)
                if not chunk:
                    raise ServerFailed(f"server closed stdout; stderr:\n{self.stderr()}")
                self._buffer += chunk
                newline = self._buffer.find(b"\n")
            line = bytes(self._buffer[:newline])
            del self._buffer[: newline + 1]
            message: dict[str, Any] = json.loads(line)
            if "id" in message and "method" not in message:
                return message

    def handshake(self) -> None:
        """Run `initialize` and send `notifications/initialized`."""
        self.send(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "protocolVersion": self._protocol_version,
                    "capabilities": {},
                    "clientInfo": {"name": self._client_name, "version": "1"},
                },
            }
        )
        reply = self.receive()
        self.initialized_at = time.monotonic()
        if "protocolVersion" not in reply.get("result", {}):
            raise ServerFailed(f"initialize failed: {reply}")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def cpu_seconds(self) -> float:
        """User plus system CPU time the server process (all its threads) has used."""
        with open(f"/proc/{self.process.pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        # utime and stime are fields 14 and 15 of proc(5); the split starts at field 3.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-4000:]

    def close(self) -> None:
        """End the session and reap the process."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()
