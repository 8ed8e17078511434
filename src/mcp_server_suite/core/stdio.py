"""The stdio shell's ground floor: what its three phases share, below all of them.

The shell is the only code that touches the process's standard streams. It serves a session
in up to three phases, each a module of its own, and each imports this one, never another
phase:

1. `core.handshake`: while the session is opening, frames are answered with plain blocking
   I/O before anything else has loaded (`answer_handshake`).
2. `core.inline`: then, still without an event loop, every frame that can be answered at
   once (`serve_inline`).
3. `core.session`: from the first call that needs it, the asyncio session (`serve`), with
   the descriptors served by type (`core.channels`).

Each phase hands the next a `Handover`: exactly where it stopped, so no byte the client sent
and no byte of an answer is lost between them.

Rules:

1. Stdout carries protocol frames only. At start-up the protocol's input and output
   descriptors are duplicated to private descriptors, descriptor 1 is pointed at stderr and
   descriptor 0 at /dev/null (`claim_stdio`), so a stray `print`, a library's log line or a
   C extension's write can never corrupt the stream or steal a request.
2. A standard descriptor the launcher left closed is opened on /dev/null before anything
   else can take its number (`guard_standard_descriptors`): otherwise the first file the
   server opens (the sandbox root, the audit log) would become its stdin, stdout or stderr,
   and protocol frames would be appended to the audit log, or records written as frames.
3. Stop signals (SIGINT, SIGTERM) are counted from start-up (`StopSignals`) and end the
   session in every phase, even while a blocking read or write waits for the client.
4. A descriptor that fails ends the session the same way in every phase: a read that fails
   (a terminal that hung up gives EIO) is the end of input (`read_input`), a write that
   fails is a client gone (`write_all` raises `ConnectionError`). Each exits 0, as end of
   input and a client gone do.

Calling order: `guard_standard_descriptors` before anything opens a file, `StopSignals()`,
the configuration, `claim_stdio`; then `answer_handshake`, then, if it returned a
`Handover`, `serve_inline` with its first call, then, if that returned a `Handover`, `serve`
with it; then `StopSignals.ignore` while the process exits.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import stat
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from mcp_server_suite.core.server import StartCall

__all__ = [
    "DRAIN_GRACE_S",
    "READ_CHUNK_BYTES",
    "Handover",
    "StopSignals",
    "Stopped",
    "claim_stdio",
    "guard_standard_descriptors",
    "read_input",
    "served_by_transports",
    "write_all",
]

logger = logging.getLogger(__name__)

# The design document's read size: one 64 KiB chunk on top of the frame ceiling bounds the
# memory a client can make the reader hold.
READ_CHUNK_BYTES: Final = 64 * 1024

# The design document's drain period after EOF or the first signal. Everything of the end of
# a session (calls finishing, the last responses reaching the client) fits in it.
DRAIN_GRACE_S: Final = 5.0

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

# The standard descriptors, in the order a closed one is filled (rule 2): the lowest free
# number is the one `open` returns.
_STANDARD_FDS: Final = (0, 1, 2)


def served_by_transports(in_fd: int, out_fd: int) -> bool:
    """Whether the event loop serves these descriptors with its transports.

    Pipes and sockets are; terminals, regular files and other character devices are not:
    not `/dev/null`, which epoll refuses (EPERM), which would leave the read transport
    without a reader and the session waiting forever for input.
    """
    if os.isatty(in_fd) or os.isatty(out_fd):
        return False
    return all(
        stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        for mode in (os.fstat(in_fd).st_mode, os.fstat(out_fd).st_mode)
    )


def guard_standard_descriptors() -> frozenset[int]:
    """Open /dev/null on every standard descriptor that is closed (rule 2).

    Call it before the process opens anything else: a closed descriptor's number is the
    first one `open` hands out. Descriptor 0 reads /dev/null (the input ends at once), 1 and
    2 write to it (what is written there is discarded).

    Returns:
        The descriptors that were closed, for the start-up checks that depend on them (a
        trail required on stderr cannot be written to a closed stderr).
    """
    closed = frozenset(fd for fd in _STANDARD_FDS if not _is_open(fd))
    for fd in sorted(closed):
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        # `open` returns the lowest free number, which is `fd`: the lower ones are open or
        # were just filled. Put it there all the same should that ever not hold.
        if null != fd:  # pragma: no cover - see above
            os.dup2(null, fd)
            os.close(null)
    return closed


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def claim_stdio() -> tuple[int, int]:
    """Take the protocol's streams away from the rest of the process (rule 1).

    Returns:
        Private duplicates of descriptors 0 and 1. Afterwards descriptor 0 reads /dev/null
        and descriptor 1 writes to stderr, so nothing else can touch the protocol streams.
    """
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null_fd, 0)
    finally:
        os.close(null_fd)
    # Stderr is open: `guard_standard_descriptors` saw to it.
    os.dup2(2, 1)
    return in_fd, out_fd


class Stopped(Exception):
    """A stop signal arrived, or the client went away, during a blocking phase."""


def read_input(fd: int) -> bytes:
    """Read one chunk of input (rule 4).

    Returns:
        What was read; empty at the end of input, or when reading failed.

    Raises:
        BlockingIOError: The descriptor is non-blocking and nothing has arrived yet.
    """
    try:
        return os.read(fd, READ_CHUNK_BYTES)
    except BlockingIOError:
        raise
    except OSError as exc:
        logger.info("reading the input failed (%s): the end of input", _name(exc))
        return b""


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data` with blocking writes (rule 4).

    Raises:
        ConnectionError: The write failed: the client is gone.
    """
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except ConnectionError:
        raise
    except OSError as exc:
        raise ConnectionError(exc.errno, exc.strerror) from None


def _name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "error")


class StopSignals:
    """SIGINT and SIGTERM before the event loop takes them over (rule 3).

    Installed at start-up, these handlers only count signals, except while a blocking read
    or write waits for the client: then they raise `Stopped`, the one way to leave a system
    call the interpreter would otherwise resume (a write to a client that has stopped
    reading never returns on its own). The session installs its own handlers when it starts
    and acts on whatever was counted here, so a signal that arrives while the event loop is
    still loading is not lost, and does not kill the process.
    """

    def __init__(self) -> None:
        self.count = 0
        self.last: signal.Signals | None = None
        self._reading = False
        self._interrupting = _Interrupting(self)
        self._previous = {signum: signal.signal(signum, self._handle) for signum in _STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum)
        if self._reading:
            raise Stopped

    def interrupting(self) -> _Interrupting:
        """A context in which a stop signal interrupts the body."""
        return self._interrupting

    def restore(self) -> None:
        """Put back the handlers that were installed before."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    @staticmethod
    def ignore() -> None:
        """Ignore stop signals from now on: the session has ended and the process is exiting.

        A client that closes stdin and then sends SIGTERM (the TypeScript SDK reaps its
        servers so, a second later SIGKILL) must not turn the exit status 0 of a clean end
        into death by signal while the process closes its pool and descriptors.
        """
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


class _Interrupting:
    # A class rather than a generator context: it is entered on every read of a session.

    __slots__ = ("_signals",)

    def __init__(self, signals: StopSignals) -> None:
        self._signals = signals

    def __enter__(self) -> None:
        self._signals._reading = True
        if self._signals.count:
            # It came after the caller last looked, before the body could be interrupted.
            self._signals._reading = False
            raise Stopped

    def __exit__(self, *exc_info: object) -> None:
        self._signals._reading = False


@dataclass(frozen=True, slots=True)
class Handover:
    """Where a blocking phase stopped: the next phase continues the session from here.

    Attributes:
        first_call: A call the phase read but could not run; the next phase starts it
            before it reads another frame.
        unsent: Answers the phase could not write without waiting; they leave first.
    """

    first_call: StartCall | None = None
    unsent: bytes = b""
