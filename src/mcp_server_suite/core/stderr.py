"""The process's stderr, written without ever waiting for whoever reads it (or does not).

A client may leave the server's stderr unread: the MCP stdio transport says it MAY ignore
it, and a pipe nobody reads fills after 64 KiB. The log, the audit trail on stderr (the
default), Python's warnings and a C library's complaints all go there.

Rules:

1. No write to stderr waits: not a log message, not an audit record, not a warning. A full
   stderr never stops a call, the session, or a stop signal.
2. How depends on what stderr is (`claim_stderr`):
   - a pipe or a terminal is opened again through `/proc/self/fd/2`, which gives the
     process an open file description of its own, made non-blocking and put on descriptor
     2 (and, by `core.stdio.claim_stdio`, on 1). The launcher's description, which other
     processes may share, keeps its flags. Every write to it from then on, the
     interpreter's and C code's included, fails at once instead of waiting.
   - a socket (journald's stream under `StandardError=journal`), or a pipe or terminal that
     cannot be opened again (no `/proc`, a pipe another user made), is written only while
     `poll` says it has room, `select.PIPE_BUF` bytes at a time, which a pipe with room
     takes without waiting. Only C code writing to descriptor 2 directly could still wait.
   - a regular file, `/dev/null` or another device never waits for a reader: plain writes.
3. What stderr does not take is dropped and counted, never queued: a message (one log
   message, one batch of audit records) is taken whole, or its beginning is taken and its
   rest, at most one message, leaves first as soon as stderr takes more; a message that
   finds stderr full, or the rest of an earlier one still waiting, is dropped. A message
   that must be taken whole (`whole=True`: a record of a trail that is required) and is
   taken only in part ends its line instead, so the stream never holds a torn record
   joined to the next line, and counts as dropped.
4. Once stderr takes output again after drops, the first line it gets says how many audit
   records and how many other messages were dropped since the last such line.

Calling order: `claim_stderr()` once at start-up, after `core.stdio.guard_standard_descriptors`
and before the log is configured (`StderrStream.log_handler`); `install_text_streams` to
route `sys.stderr` and `sys.stdout` through it.
"""

from __future__ import annotations

import io
import logging
import os
import select
import stat
import sys
import threading
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "STDERR_FD",
    "StderrStream",
    "claim_stderr",
    "install_text_streams",
    "stderr_stream",
]

STDERR_FD: Final = 2

# The most a write in `poll` mode hands over at once: a pipe that `poll` reports writable
# has a free buffer page, which takes this many bytes without waiting (pipe(7)).
_POLL_WRITE_BYTES: Final = select.PIPE_BUF

_Mode: TypeAlias = Literal["nonblocking", "poll", "blocking"]

# The report of rule 4 before a log format is chosen (`log_handler`).
_DEFAULT_FORMAT: Final = "%(name)s: %(message)s"

_logger_name: Final = __name__


class StderrStream(io.RawIOBase):
    """Stderr as rules 1 to 4 write it.

    As a raw stream (`write`), it is what `sys.stderr` and the log write through: every
    write is one message, and it always reports the whole message written.

    Args:
        fd: The descriptor to write to.
        mode: How writes avoid waiting (rule 2).
    """

    def __init__(self, fd: int = STDERR_FD, mode: _Mode = "blocking") -> None:
        super().__init__()
        self.fd = fd
        self.mode: Final = mode
        self._lock = threading.Lock()
        self._rest = b""
        self._poll: select.poll | None = None
        if mode == "poll":
            self._poll = select.poll()
            self._poll.register(fd, select.POLLOUT)
        # Dropped since the last report (rule 4), and in all.
        self._unreported_records = 0
        self._unreported_messages = 0
        self.dropped_records = 0
        self.dropped_messages = 0
        self._formatter = logging.Formatter(_DEFAULT_FORMAT)
        # One text stream for `sys.stderr`, `sys.stdout` and the log. Line-buffered: text
        # reaches this raw stream a line at a time or more (a log message, traceback
        # included, is one write), so a message of rule 3 is whole lines, and `print`'s
        # text and newline, two writes of text, are one message.
        self.text: Final = io.TextIOWrapper(
            self, encoding="utf-8", errors="backslashreplace", line_buffering=True
        )

    # io.RawIOBase: what `sys.stderr` and the log handler write through.

    @property
    def name(self) -> str:
        return "<stderr>"

    def fileno(self) -> int:
        return self.fd

    def writable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        raise io.UnsupportedOperation("stderr is written, not read")

    def write(self, data: ReadableBuffer) -> int:
        """Send one message (rule 3); it always counts as written, whatever became of it."""
        message = bytes(data)
        self.send(message)
        return len(message)

    def close(self) -> None:
        """Stay open: stderr serves until the process is gone, its finalization included.

        The text stream over it closes it when it is collected, which must not make the
        warnings of the interpreter's exit fail.
        """

    def send(self, data: bytes, *, records: int = 0, whole: bool = False) -> bool:
        """Hand one message to stderr without waiting (rules 1 and 3).

        Args:
            data: The message, whole lines.
            records: How many audit records it holds; 0 for any other message.
            whole: Whether only the whole message counts (a required trail's record).

        Returns:
            Whether it was taken: whole, or begun with its rest waiting to leave first
            (unless `whole`). When not, it was dropped and counted.
        """
        with self._lock:
            if (self._rest and not self._flush_rest()) or not self._report():
                return self._dropped(records)
            taken = self._put(data)
            if taken == len(data):
                return True
            if taken == 0:
                return self._dropped(records)
            if whole:
                # The beginning left: end its line, so the next one starts clean (rule 3).
                self._rest = b"\n"
                return self._dropped(records)
            self._rest = data[taken:]
            return True

    def flush_rest(self) -> None:
        """Write what waits to leave first, if stderr takes it now (at the end of a session)."""
        with self._lock:
            if self._rest:
                self._flush_rest()

    def log_handler(self, fmt: str) -> logging.Handler:
        """A log handler writing each message through this stream, formatted with `fmt`.

        The report of rule 4 uses the same format.
        """
        self._formatter = logging.Formatter(fmt)
        handler = logging.StreamHandler(self.text)
        handler.setFormatter(self._formatter)
        return handler

    def _flush_rest(self) -> bool:
        taken = self._put(self._rest)
        self._rest = self._rest[taken:]
        return not self._rest

    def _report(self) -> bool:
        # Rule 4: whether nothing is left to report before the next message.
        records, messages = self._unreported_records, self._unreported_messages
        if not (records or messages):
            return True
        text = (
            f"stderr was full: {records} audit record{'s' * (records != 1)} and {messages} "
            f"other message{'s' * (messages != 1)} written meanwhile were dropped"
        )
        entry = logging.makeLogRecord(
            {"name": _logger_name, "levelno": logging.WARNING, "levelname": "WARNING", "msg": text}
        )
        line = (self._formatter.format(entry) + "\n").encode("utf-8", "backslashreplace")
        taken = self._put(line)
        if taken == 0:
            return False
        self._unreported_records = self._unreported_messages = 0
        self._rest = line[taken:]
        return not self._rest

    def _dropped(self, records: int) -> bool:
        if records:
            self._unreported_records += records
            self.dropped_records += records
        else:
            self._unreported_messages += 1
            self.dropped_messages += 1
        return False

    def _put(self, data: bytes) -> int:
        # How much of `data` stderr takes now, without waiting (rule 2). A failure (a reader
        # that closed its end: EPIPE) takes nothing, like a full pipe.
        view = memoryview(data)
        done = 0
        try:
            if self._poll is not None:
                while done < len(view) and self._poll.poll(0):
                    done += os.write(self.fd, view[done : done + _POLL_WRITE_BYTES])
            elif self.mode == "nonblocking":
                done = os.write(self.fd, view)
            else:
                while done < len(view):
                    done += os.write(self.fd, view[done:])
        except OSError:
            pass
        return done


_claimed: StderrStream | None = None


def claim_stderr(fd: int = STDERR_FD) -> StderrStream:
    """Make stderr a stream that never waits (rule 2), and keep it for `stderr_stream`.

    Args:
        fd: The descriptor to claim: stderr's.

    Returns:
        The stream that writes to it.
    """
    global _claimed  # noqa: PLW0603  # The process has one stderr.
    mode = _mode_of(fd)
    if mode == "poll" and not stat.S_ISSOCK(os.fstat(fd).st_mode):
        try:
            private = os.open(
                f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            )
        except OSError:
            pass  # No /proc, a pipe of another user's, a terminal that hung up: rule 2.
        else:
            os.dup2(private, fd)
            os.close(private)
            mode = "nonblocking"
    _claimed = StderrStream(fd, mode)
    return _claimed


def stderr_stream() -> StderrStream:
    """The process's stderr stream: the one claimed, or a plain one on descriptor 2."""
    return StderrStream(STDERR_FD, _mode_of(STDERR_FD)) if _claimed is None else _claimed


def install_text_streams(stream: StderrStream) -> None:
    """Route `sys.stderr`, and `sys.stdout` (which `claim_stdio` points at stderr), through
    the stream: a warning or a stray `print` can neither wait nor fail on a full stderr."""
    sys.stderr = stream.text
    sys.stdout = stream.text


def _mode_of(fd: int) -> _Mode:
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return "poll"
    return "blocking"
