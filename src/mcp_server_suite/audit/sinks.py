"""Where audit records go: stderr, an append-only file, or the systemd journal.

Rules:

1. A sink is opened at start-up, before the server reads a byte, and a destination that
   cannot be opened is a configuration error (exit 78), like any invalid variable.
2. A batch of records is one write: one `write(2)` on a descriptor opened with `O_APPEND`
   (one datagram per record to the journal, which takes one entry per datagram). Several
   servers (one per socket-activated connection) can share one file, and their lines never
   interleave.
3. A sink never buffers or drops silently: `write_batch` either hands every record to the
   kernel whole or raises `RecordsLost`, saying how many it did hand over and why not the
   rest (the errno's name, and for a destination that stopped taking records, which), and
   the trail decides what that means for the call. The one retry is the journal's: a
   journald that restarted has a new socket, reached again once.
4. No record is left torn in a file: a short write (a disk that filled, a file-size limit)
   is completed or cut back to where it began, so the file holds whole records only and
   the failure is reported with the kernel's reason (`ENOSPC`, `EFBIG`), not as a short
   write. Only when another writer appended after the torn piece can it not be cut; the
   next batch then starts on a new line, so the piece cannot swallow it.
5. A destination that does not take records never holds the server up for long. Stderr is
   never waited for (`core.stderr`). The journal is waited for only by a required trail,
   at most `JOURNAL_SEND_TIMEOUT_S` per batch, and after a wait that ran out, not again
   until the journal has taken a datagram: a journald that does not read costs one wait,
   not one per batch. A trail that is not required never waits for it.
6. The journal is spoken to natively (`KEY=value` fields in one datagram to
   `JOURNAL_SOCKET`), under `SYSLOG_IDENTIFIER=mcp-server-suite-audit`, with the JSON line as
   `MESSAGE`: no logging library, no dependency, and `journalctl -t mcp-server-suite-audit`
   shows exactly the records.
"""

from __future__ import annotations

import errno
import math
import os
import select
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from mcp_server_suite.config import ConfigError
from mcp_server_suite.core.stderr import StderrStream, stderr_stream

if TYPE_CHECKING:
    import socket

__all__ = [
    "JOURNAL_IDENTIFIER",
    "JOURNAL_SEND_TIMEOUT_S",
    "JOURNAL_SOCKET",
    "AuditSink",
    "FileSink",
    "JournalSink",
    "RecordsLost",
    "StderrSink",
    "journal_datagram",
    "open_sink",
]

# The native protocol socket of systemd-journald (systemd.journal-fields(7), "Native
# protocol"); the same path on every systemd system.
JOURNAL_SOCKET: Final = Path("/run/systemd/journal/socket")

# What `journalctl -t` selects on; distinct from the server's own log lines, which reach the
# journal through stderr under the unit's name.
JOURNAL_IDENTIFIER: Final = "mcp-server-suite-audit"

# syslog(3) LOG_INFO: a record is routine, not a warning.
_JOURNAL_PRIORITY: Final = 6

# A record is at most the 64 KiB argument copy plus its members; the kernel's default
# datagram limit (net.core.wmem_default, about 208 KiB) holds that, and asking for 1 MiB
# lifts it where the system allows.
_JOURNAL_SEND_BUFFER_BYTES: Final = 1024 * 1024

# A journal that does not take a batch within this time, while a required trail waits for
# it, is treated as a failed write (rule 5): the event loop is never held longer by the audit
# trail, and a journald busy for a moment (a rotation, a burst from other services) still
# gets the records.
JOURNAL_SEND_TIMEOUT_S: Final = 1.0

# The audit log may hold SQL text (MCP_AUDIT_ARGUMENTS=full): only its owner reads it.
_FILE_MODE: Final = 0o600


class RecordsLost(OSError):
    """Records of a batch were not written (rule 3).

    Args:
        error: Why: the kernel's error, or one a sink made to name a destination that does
            not take records.
        written: How many records of the batch, from its start, were written.
    """

    def __init__(self, error: OSError, written: int = 0) -> None:
        super().__init__(error.errno, error.strerror)
        self.written = written

    @property
    def reason(self) -> str:
        """The errno's name, with the sink's explanation when it gave one."""
        name = errno.errorcode.get(self.errno or 0, "error")
        return f"{name}: {self.strerror}" if self.strerror in _EXPLANATIONS else name


# What a sink says when a destination does not take records: the report names it, where for
# a system error the errno's name says enough.
_STDERR_FULL: Final = "stderr is full: nobody reads it"
_JOURNAL_FULL: Final = "the journal's queue is full: journald is not reading"
_EXPLANATIONS: Final = frozenset({_STDERR_FULL, _JOURNAL_FULL})


class AuditSink(Protocol):
    """A destination for whole records."""

    @property
    def description(self) -> str:
        """Where the records go, for operators (`--check-config`, the failure report)."""
        ...

    def write(self, record: bytes) -> None:
        """Hand one record to the kernel whole.

        Raises:
            OSError: The record was not written, or not whole.
        """
        ...

    def write_batch(self, records: list[bytes]) -> None:
        """Hand several records to the kernel, each whole, in as few writes as the
        destination allows.

        Raises:
            RecordsLost: Records were not written (how many were, and why).
        """
        ...

    def close(self) -> None:
        """Release the destination; idempotent."""
        ...


class StderrSink:
    """Records on the process's stderr, among the log lines, never waited for (rule 5).

    Args:
        stream: The process's stderr (`core.stderr`).
        whole: Count a batch only when stderr took it whole: a trail that is required
            refuses a call whose record stderr took only in part.
    """

    description = "stderr"

    def __init__(self, stream: StderrStream, *, whole: bool = False) -> None:
        self._stream = stream
        self._whole = whole

    def write(self, record: bytes) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[bytes]) -> None:
        if not self._stream.send(b"".join(records), records=len(records), whole=self._whole):
            raise RecordsLost(OSError(errno.EAGAIN, _STDERR_FULL))

    def close(self) -> None:
        self._stream.flush_rest()


class FileSink:
    """Records appended to a regular file, created with mode 0600 when missing (rule 4).

    Args:
        path: An absolute path.

    Raises:
        OSError: The file cannot be opened for appending.
        ConfigError: The path names something other than a regular file.
    """

    def __init__(self, path: Path) -> None:
        # O_NONBLOCK: a FIFO named by mistake fails to open (no reader) instead of hanging
        # start-up; the type is then checked on the descriptor, not on the name.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        fd = os.open(path, flags, _FILE_MODE)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError("MCP_AUDIT_LOG", "a regular file to append to", str(path))
        os.set_blocking(fd, True)
        self._fd = fd
        self._torn = False
        self.description = str(path)

    def write(self, record: bytes) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[bytes]) -> None:
        data = b"".join(records)
        if self._torn:
            data = b"\n" + data
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            raise RecordsLost(exc) from None
        if written != len(data):
            self._complete(data, written)
        self._torn = False

    def _complete(self, data: bytes, written: int) -> None:
        # A short write: the kernel took a piece and would refuse the rest; writing the rest
        # learns why (rule 4), or completes the batch when the cause has passed.
        end = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            while written < len(data):
                written += _write_more(self._fd, data[written:])
                end = os.lseek(self._fd, 0, os.SEEK_CUR)
        except OSError as exc:
            self._cut_back(end, end - written)
            raise RecordsLost(exc) from None

    def _cut_back(self, end: int, start: int) -> None:
        # The piece written ends at `end`; it is cut off unless another writer appended since.
        try:
            if os.fstat(self._fd).st_size == end:
                os.ftruncate(self._fd, start)
                return
        except OSError:  # An append-only file (chattr +a) cannot be cut.
            pass
        self._torn = True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_more(fd: int, data: bytes) -> int:
    written = os.write(fd, data)
    if written == 0:  # pragma: no cover - a regular file never takes nothing without an error
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    return written


class JournalSink:
    """Records sent to systemd-journald over its native protocol (rules 5 and 6).

    Args:
        path: The journal's socket; `JOURNAL_SOCKET` on every systemd system.
        send_timeout: How long a batch may wait for room in the journal's queue, while the
            journal takes datagrams; 0 (a trail that is not required) never waits.

    Raises:
        OSError: The socket cannot be reached.
    """

    def __init__(self, path: Path, *, send_timeout: float = 0.0) -> None:
        import socket  # noqa: PLC0415  # Only this destination needs sockets.

        self.description = f"the systemd journal ({path}, SYSLOG_IDENTIFIER={JOURNAL_IDENTIFIER})"
        self._path = str(path)
        self._wait = send_timeout
        # Whether the journal took the last datagram, or a wait for it ran out (rule 5).
        self._taking = True
        self._socket: socket.socket | None = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
        )
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _JOURNAL_SEND_BUFFER_BYTES)
            # Connecting proves at start-up that the journal listens.
            self._socket.connect(self._path)
        except OSError:
            self.close()
            raise
        self._room = select.poll()
        self._room.register(self._socket, select.POLLOUT)

    def write(self, record: bytes) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[bytes]) -> None:
        # The journal makes one entry of each datagram.
        if self._socket is None:
            raise RecordsLost(OSError(errno.EBADF, "the journal sink is closed"))
        deadline = time.monotonic() + self._wait
        for index, record in enumerate(records):
            try:
                self._send(self._socket, journal_datagram(record), deadline)
            except OSError as exc:
                raise RecordsLost(exc, written=index) from None

    def _send(self, sock: socket.socket, datagram: bytes, deadline: float) -> None:
        reconnected = False
        while True:
            try:
                sock.send(datagram)
            except BlockingIOError:
                left = deadline - time.monotonic() if self._taking else 0.0
                if left <= 0 or not self._room.poll(math.ceil(left * 1000)):
                    self._taking = False
                    raise OSError(errno.EAGAIN, _JOURNAL_FULL) from None
            except (ConnectionRefusedError, FileNotFoundError):
                if reconnected:
                    raise
                # journald restarted: its socket is a new one at the same path.
                sock.connect(self._path)
                reconnected = True
            else:
                self._taking = True
                return

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def journal_datagram(record: bytes) -> bytes:
    """The native-protocol datagram for one record.

    Args:
        record: One JSON line, newline included.

    Returns:
        `MESSAGE`, `SYSLOG_IDENTIFIER` and `PRIORITY` fields, one `KEY=value` line each.
    """
    message = record.rstrip(b"\n")
    if b"\n" in message:
        # Records are single lines by construction; the length-prefixed form of the protocol
        # would carry a newline, but refusing keeps the one field format this sink writes.
        raise ValueError("an audit record must be one line")
    return b"MESSAGE=%s\nSYSLOG_IDENTIFIER=%s\nPRIORITY=%d\n" % (
        message,
        JOURNAL_IDENTIFIER.encode("ascii"),
        _JOURNAL_PRIORITY,
    )


def open_sink(
    destination: str | Path, *, required: bool = False, stderr_closed: bool = False
) -> AuditSink | None:
    """Open the destination `MCP_AUDIT_LOG` names.

    Args:
        destination: `stderr`, `off`, `journal`, or an absolute path (validated by config).
        required: Whether calls will be refused when they cannot be recorded; then a closed
            stderr is refused at start-up too, and the journal is waited for (rule 5).
        stderr_closed: Whether the launcher left stderr closed (it reads /dev/null since:
            `core.stdio.guard_standard_descriptors`).

    Returns:
        The sink, or None for `off`.

    Raises:
        ConfigError: The destination cannot be opened; the message names the variable and
            what it needs.
    """
    if destination == "off":
        return None
    if destination == "stderr":
        if required and stderr_closed:
            raise ConfigError("MCP_AUDIT_LOG", "an open stderr when MCP_AUDIT_REQUIRED=true")
        return StderrSink(stderr_stream(), whole=required)
    if destination == "journal":
        try:
            return JournalSink(
                JOURNAL_SOCKET, send_timeout=JOURNAL_SEND_TIMEOUT_S if required else 0.0
            )
        except OSError as exc:
            raise ConfigError(
                "MCP_AUDIT_LOG",
                f"the systemd journal to accept datagrams at {JOURNAL_SOCKET} ({_reason(exc)})",
                "journal",
            ) from None
    path = Path(destination)
    try:
        return FileSink(path)
    except OSError as exc:
        raise ConfigError(
            "MCP_AUDIT_LOG", f"a file the server can append to ({_reason(exc)})", str(path)
        ) from None


def _reason(exc: OSError) -> str:
    # The errno's name and text, never the exception's own message, which repeats the path.
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name}: {os.strerror(exc.errno)}" if exc.errno else name
