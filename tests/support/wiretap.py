"""A transparent stdio relay that records every line a client and a server exchange.

Real clients launch the server themselves, so the only place to see what went over the wire
is between the two: `python -m tests.support.wiretap DIR COMMAND...` starts COMMAND, copies
the client's stdin to it and its stdout back, line by line and unchanged, and appends each
line to `DIR/<pid>.jsonl` as `{"from": "client" | "server", "line": "..."}`. One file per
relay, because a client may start several servers (the TypeScript client's auto mode probes
on a sibling process). The server's stderr is inherited. `read_transcripts(DIR)` reads the
files back.

Rules:
- Nothing is changed, buffered past a line or dropped: a line is forwarded as soon as its
  newline arrives, and end of input is passed on by closing the server's stdin.
- The relay exits with the server's status once the server's stdout ends; SIGTERM and SIGINT
  are passed on to the server, which decides how to stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

__all__ = ["Sender", "Transcript", "WireLine", "read_transcripts", "wiretap_command"]

Sender = Literal["client", "server"]


@dataclass(frozen=True)
class WireLine:
    """One line as it crossed the wire, decoded when it is JSON."""

    sender: Sender
    text: str

    @property
    def message(self) -> Any:
        """The line parsed as JSON (raises `ValueError` for a line that is not JSON)."""
        return json.loads(self.text)


@dataclass(frozen=True)
class Transcript:
    """Everything one relayed server process exchanged with its client, in order."""

    path: Path
    lines: tuple[WireLine, ...]

    def sent_by(self, sender: Sender) -> list[Any]:
        """The decoded messages `sender` wrote."""
        return [line.message for line in self.lines if line.sender == sender]


def wiretap_command(log_dir: Path, command: Sequence[str]) -> list[str]:
    """The command line that runs `command` behind the relay, logging into `log_dir`."""
    return [sys.executable, "-m", "tests.support.wiretap", str(log_dir), *command]


def read_transcripts(log_dir: Path) -> list[Transcript]:
    """Every relay's transcript in `log_dir`, oldest process first."""
    transcripts = []
    for path in sorted(log_dir.glob("*.jsonl"), key=lambda item: item.stat().st_mtime_ns):
        records = [json.loads(raw) for raw in path.read_text("utf-8").splitlines()]
        lines = tuple(WireLine(record["from"], record["line"]) for record in records)
        transcripts.append(Transcript(path, lines))
    return transcripts


class _Log:
    """Appends records from both relay directions to one file, one whole line at a time."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._closed = False

    def record(self, sender: Sender, raw: bytes) -> None:
        text = raw.rstrip(b"\n").decode("utf-8", "backslashreplace")
        entry = json.dumps({"from": sender, "line": text}, ensure_ascii=True)
        with self._lock:
            if self._closed:  # A line the client sent after the server ended reached nobody.
                return
            self._file.write(entry + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._file.close()


def _relay(source: IO[bytes], sink: IO[bytes], sender: Sender, log: _Log) -> None:
    """Copy `source` to `sink` line by line, logging each line; close `sink` at the end."""
    # A broken pipe means the other end went away; what it missed is still in the log.
    with contextlib.suppress(BrokenPipeError):
        try:
            for raw in iter(source.readline, b""):
                log.record(sender, raw)
                sink.write(raw)
                sink.flush()
        finally:
            sink.close()


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m tests.support.wiretap DIR COMMAND...", file=sys.stderr)
        return 2
    log_dir = Path(argv[0])
    log_dir.mkdir(parents=True, exist_ok=True)
    log = _Log(log_dir / f"{os.getpid()}.jsonl")
    server = subprocess.Popen(list(argv[1:]), stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def forward(signum: int, _frame: FrameType | None) -> None:
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if server.stdin is None or server.stdout is None:  # pragma: no cover - both are pipes
        raise RuntimeError("the server's streams are not pipes")
    # Daemon: a client that keeps its end open must not keep the relay alive after the server.
    inbound = threading.Thread(
        target=_relay, args=(sys.stdin.buffer, server.stdin, "client", log), daemon=True
    )
    inbound.start()
    _relay(server.stdout, sys.stdout.buffer, "server", log)
    status = server.wait()
    log.close()
    # A server ended by a signal reports it as a shell would, 128 plus the signal number.
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
