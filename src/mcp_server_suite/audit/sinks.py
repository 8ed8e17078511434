"""Where audit records go: stderr, an append-only file, or the systemd journal.

Rules:

1. A sink is opened at start-up, before the server reads a byte, and a destination that
   cannot be opened is a configuration error (exit 78), like any invalid variable.
2. A batch of records is one write: one `write(2)` on a descriptor opened with `O_APPEND`
   (one datagram per record to the journal, which takes one entry per datagram). Several
   servers (one per socket-activated connection) can share one file, and their lines never
   interleave. A short write is a failure, and the next write starts on a new line so the
   torn one cannot swallow it.
3. A sink never buffers or drops silently: `write` either hands the whole record to the
   kernel or raises `OSError`, and the trail decides what that means for the call. The one
   retry is the journal's: a journald that restarted has a new socket, reached again once.
4. The journal is spoken to natively (`KEY=value` fields in one datagram to
   `JOURNAL_SOCKET`), under `SYSLOG_IDENTIFIER=mcp-server-suite-audit`, with the JSON line as
   `MESSAGE`: no logging library, no dependency, and `journalctl -t mcp-server-suite-audit`
   shows exactly the records.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from mcp_server_suite.config import ConfigError

if TYPE_CHECKING:
    import socket

__all__ = [
    "JOURNAL_IDENTIFIER",
    "JOURNAL_SOCKET",
    "AuditSink",
    "FileSink",
    "JournalSink",
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

# A journal that does not take a datagram within this time is treated as a failed write: the
# event loop is never held longer by the audit trail.
JOURNAL_SEND_TIMEOUT_S: Final = 1.0

# The audit log may hold SQL text (MCP_AUDIT_ARGUMENTS=full): only its owner reads it.
_FILE_MODE: Final = 0o600

_STDERR_FD: Final = 2


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
            OSError: A record was not written, or not whole.
        """
        ...

    def close(self) -> None:
        """Release the destination; idempotent."""
        ...


class _DescriptorSink:
    """Records written to a descriptor with one `write(2)` each."""

    def __init__(self, fd: int, description: str, *, owned: bool) -> None:
        self._fd = fd
        self._owned = owned
        self._torn = False
        self.description = description

    def write(self, record: bytes) -> None:
        data = b"\n" + record if self._torn else record
        written = os.write(self._fd, data)
        if written != len(data):
            self._torn = True
            raise OSError(errno.EIO, "short write")
        self._torn = False

    def write_batch(self, records: list[bytes]) -> None:
        self.write(b"".join(records))

    def close(self) -> None:
        if self._owned and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class StderrSink(_DescriptorSink):
    """Records on the process's stderr (descriptor 2), among the log lines."""

    def __init__(self) -> None:
        super().__init__(_STDERR_FD, "stderr", owned=False)


class FileSink(_DescriptorSink):
    """Records appended to a regular file, created with mode 0600 when missing.

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
        super().__init__(fd, str(path), owned=True)


class JournalSink:
    """Records sent to systemd-journald over its native protocol.

    Args:
        path: The journal's socket; `JOURNAL_SOCKET` on every systemd system.
        send_timeout: How long one datagram may wait for room in the journal's queue.

    Raises:
        OSError: The socket cannot be reached.
    """

    def __init__(self, path: Path, *, send_timeout: float = JOURNAL_SEND_TIMEOUT_S) -> None:
        import socket  # noqa: PLC0415  # Only this destination needs sockets.

        self.description = f"the systemd journal ({path}, SYSLOG_IDENTIFIER={JOURNAL_IDENTIFIER})"
        self._path = str(path)
        self._socket: socket.socket | None = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
        )
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _JOURNAL_SEND_BUFFER_BYTES)
            self._socket.settimeout(send_timeout)
            # Connecting proves at start-up that the journal listens; sends name the path
            # each time, so a restarted journald (a new socket) is reached again.
            self._socket.connect(self._path)
        except OSError:
            self.close()
            raise

    def write(self, record: bytes) -> None:
        if self._socket is None:
            raise OSError(errno.EBADF, "the journal sink is closed")
        self._send(self._socket, journal_datagram(record))

    def write_batch(self, records: list[bytes]) -> None:
        # The journal makes one entry of each datagram.
        for record in records:
            self.write(record)

    def _send(self, sock: socket.socket, datagram: bytes) -> None:
        try:
            sock.send(datagram)
        except (ConnectionRefusedError, FileNotFoundError):
            # journald restarted: its socket is a new one at the same path.
            sock.connect(self._path)
            sock.send(datagram)

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


def open_sink(destination: str | Path, *, required: bool = False) -> AuditSink | None:
    """Open the destination `MCP_AUDIT_LOG` names.

    Args:
        destination: `stderr`, `off`, `journal`, or an absolute path (validated by config).
        required: Whether calls will be refused when they cannot be recorded; then a closed
            stderr is refused at start-up too.

    Returns:
        The sink, or None for `off`.

    Raises:
        ConfigError: The destination cannot be opened; the message names the variable and
            what it needs.
    """
    if destination == "off":
        return None
    if destination == "stderr":
        if required and not _is_open(_STDERR_FD):
            raise ConfigError("MCP_AUDIT_LOG", "an open stderr when MCP_AUDIT_REQUIRED=true")
        return StderrSink()
    if destination == "journal":
        try:
            return JournalSink(JOURNAL_SOCKET)
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


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _reason(exc: OSError) -> str:
    # The errno's name and text, never the exception's own message, which repeats the path.
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name}: {os.strerror(exc.errno)}" if exc.errno else name
