"""A transparent stdio relay that records every line a client and a server exchange.

Real clients launch the server themselves, so the only place to see what went over the wire
is between the two: `python -m tests.support.wiretap DIR COMMAND...` starts COMMAND, copies
the client's stdin to it and its stdout back, line by line and unchanged, and appends each
line to `DIR/<pid>.jsonl` as `{"from": "client" | "server", "line": "..."}`. The server's
stderr is passed on to the relay's own and logged too (`"from": "stderr"`), because some
clients discard it, and the server's exit status ends the file (`"from": "exit"`). One file
per relay, because a client may start several servers (the TypeScript client probes on a
sibling process). `read_transcripts(DIR)` reads the files back.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

__all__ = ["Sender", "Transcript", "WireLine", "read_transcripts", "wiretap_command"]

# One read of a pipe; lines longer than this are assembled from several reads.
CHUNK_BYTES = 1 << 16

Sender = Literal["client", "server"]
Source = Literal["client", "server", "stderr", "exit"]


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
    """Everything one relayed server process exchanged with its client, in order.

    Attributes:
        path: The log file.
        lines: The protocol lines, in the order the relay saw them.
        stderr: What the server wrote to stderr.
        status: The server's exit status (128 plus the signal for a signal), or `None` when
            the relay itself was stopped before the server ended.
    """

    path: Path
    lines: tuple[WireLine, ...]
    stderr: str = ""
    status: int | None = None

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
        lines = tuple(
            WireLine(record["from"], record["line"])
            for record in records
            if record["from"] in ("client", "server")
        )
        stderr = "".join(record["line"] + "\n" for record in records if record["from"] == "stderr")
        exits = [int(record["line"]) for record in records if record["from"] == "exit"]
        transcripts.append(Transcript(path, lines, stderr, exits[0] if exits else None))
    return transcripts


class _Log:
    """Appends records from both relay directions to one file, one whole line at a time."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._closed = False

    def record(self, sender: Source, raw: bytes) -> None:
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


def _lines(fd: int) -> Iterator[bytes]:
    """The lines read from `fd` (the last one without its newline if input ends mid-line).

    Reads the descriptor directly: a daemon thread blocked in a buffered reader holds the
    reader's lock, and the interpreter aborts when it finds that lock taken at exit.
    """
    pending = b""
    while chunk := os.read(fd, CHUNK_BYTES):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line + b"\n"
    if pending:
        yield pending


def _relay(
    source: int, sink: IO[bytes], sender: Source, log: _Log, close_sink: bool = True
) -> None:
    """Copy descriptor `source` to `sink` line by line, logging each line, until it ends.

    A sink that breaks (its reader went away) stops being written to, but `source` is still
    drained and logged, so the writer on the other side never blocks on a full pipe.
    """
    open_sink: IO[bytes] | None = sink
    for raw in _lines(source):
        log.record(sender, raw)
        if open_sink is None:
            continue
        try:
            open_sink.write(raw)
            open_sink.flush()
        except BrokenPipeError:
            open_sink = None
    if close_sink:
        # Closing flushes nothing that was not flushed already, or lost with its reader.
        with contextlib.suppress(BrokenPipeError):
            sink.close()


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m tests.support.wiretap DIR COMMAND...", file=sys.stderr)
        return 2
    log_dir = Path(argv[0])
    log_dir.mkdir(parents=True, exist_ok=True)
    log = _Log(log_dir / f"{os.getpid()}.jsonl")
    server = subprocess.Popen(
        list(argv[1:]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if server.stdin is None or server.stdout is None or server.stderr is None:
        raise RuntimeError("the server's streams are not pipes")
    # Daemon: a client that keeps its end open must not keep the relay alive after the server.
    inbound = threading.Thread(
        target=_relay, args=(sys.stdin.fileno(), server.stdin, "client", log), daemon=True
    )
    inbound.start()
    # The relay's own stderr stays open: it is where Python reports the relay's own failures.
    errors = threading.Thread(
        target=_relay, args=(server.stderr.fileno(), sys.stderr.buffer, "stderr", log, False)
    )
    errors.start()
    _relay(server.stdout.fileno(), sys.stdout.buffer, "server", log)
    status = server.wait()
    errors.join()
    # A server ended by a signal reports it as a shell would, 128 plus the signal number.
    status = status if status >= 0 else 128 - status
    log.record("exit", str(status).encode())
    log.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
