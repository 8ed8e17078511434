"""The stdio shell: the only place the process's standard streams are touched.

Rules:

1. Stdout carries protocol frames only. At start-up the protocol's input and output
   descriptors are duplicated to private descriptors, descriptor 1 is pointed at stderr and
   descriptor 0 at /dev/null, so a stray `print`, a library's log line or a C extension's
   write can never corrupt the stream or steal a request.
2. One `asyncio.TaskGroup` owns every task of the session. Each `tools/call` is a child task
   that runs the guardrails; nothing outlives the session.
3. Backpressure: every write waits while the output buffer is above its high-water mark,
   and the read loop waits for the output to drain before it reads more. A client that
   stops reading stops the server reading, instead of responses queueing without bound.
4. Shutdown: end of input, SIGINT and SIGTERM stop the reading and give calls in flight a
   grace period; a second signal, or the end of the grace period, cancels them. A failed
   write means the client is gone: calls are cancelled at once. Every path exits 0.
5. Descriptors are served by what they are: pipes through asyncio's pipe transports, a
   connected socket (systemd socket activation passes one socket as stdin and stdout)
   through one socket transport, and regular files, terminals and other character devices
   through plain blocking I/O on a reader thread, because non-blocking mode cannot be set
   on them safely and epoll refuses some of them (`/dev/null`, systemd's
   `StandardInput=null`).

The session runs in two phases. While the session is opening (no era chosen yet, or a
legacy session before `initialize`), `answer_handshake` serves frames with plain blocking
reads and writes: nothing can run concurrently yet (`server/discover`, `initialize` and
`ping` are answered inline, and calls are refused before `initialize`), so the event loop
is not needed, and a client's handshake or discovery is answered before asyncio has even
been imported. The phase ends when the session is ready for calls (`initialize` answered,
or a first 2026-07-28 request other than `server/discover` answered), or at the first call,
which it hands over unstarted. `serve` then runs the asyncio session (`core._session`,
rules 2 to 5) with the same dispatcher and framer, so no byte the client sent is lost
between the phases; a stop signal or a client gone during the phase ends the session, even
while a write is blocked on a client that does not read.

Calling order: `claim_stdio` and `StopSignals()`, then `answer_handshake`, then, if it
returned a `Handover`, `serve` with it; then `StopSignals.ignore` while the process exits.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Final

from mcp_server_suite.core.framing import NEED_DATA, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import Dispatcher, Send, SessionState, StartCall

if TYPE_CHECKING:
    from mcp_server_suite.audit.trail import AuditTrail
    from mcp_server_suite.guardrails.pipeline import Guardrails

__all__ = [
    "READ_CHUNK_BYTES",
    "Handover",
    "StopSignals",
    "answer_handshake",
    "claim_stdio",
    "serve",
]

# The design document's read size: one 64 KiB chunk on top of the frame ceiling bounds the
# memory a client can make the reader hold.
READ_CHUNK_BYTES: Final = 64 * 1024

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

# The states the blocking phase serves: before them nothing can be in flight.
_OPENING_STATES: Final = frozenset({SessionState.OPENING, SessionState.AWAITING_INIT})


class _Stopped(Exception):
    """A stop signal arrived, or the client went away, during the handshake phase."""


def claim_stdio() -> tuple[int, int]:
    """Take the protocol's streams away from the rest of the process.

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
    try:
        os.dup2(2, 1)
    except OSError:  # pragma: no cover - stderr closed by the parent
        sink = os.open(os.devnull, os.O_WRONLY)
        os.dup2(sink, 1)
        os.close(sink)
    return in_fd, out_fd


class StopSignals:
    """SIGINT and SIGTERM before the event loop takes them over.

    Installed before the handshake, these handlers only count signals, except while a
    blocking read or write waits for the client: then they raise `_Stopped`, the one way to
    leave a system call the interpreter would otherwise resume (a write to a client that has
    stopped reading never returns on its own). The session installs its own handlers
    when it starts and acts on whatever was counted here, so a signal that arrives while
    the event loop is still loading is not lost, and does not kill the process.
    """

    def __init__(self) -> None:
        self.count = 0
        self.last: signal.Signals | None = None
        self._reading = False
        self._previous = {signum: signal.signal(signum, self._handle) for signum in _STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum)
        if self._reading:
            raise _Stopped

    @contextmanager
    def interrupting(self) -> Iterator[None]:
        """Let a stop signal interrupt the body."""
        self._reading = True
        try:
            yield
        finally:
            self._reading = False

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


@dataclass(frozen=True, slots=True)
class Handover:
    """Where the blocking phase stopped: the event loop continues the session from here.

    Attributes:
        first_call: A call the phase read but could not run; the session starts it before
            it reads another frame.
    """

    first_call: StartCall | None = None


def answer_handshake(
    dispatcher: Dispatcher,
    framer: LineFramer,
    stop: StopSignals,
    *,
    in_fd: int,
    out_fd: int,
) -> Handover | None:
    """Serve frames with blocking I/O while the session is opening.

    Args:
        dispatcher: The session's protocol state machine, still opening.
        framer: The session's framer; frames after the phase stay buffered in it.
        stop: The stop-signal handlers installed for this phase.
        in_fd: The descriptor requests arrive on.
        out_fd: The descriptor responses go to.

    Returns:
        A `Handover` when `serve` should continue the session; None when input ended, the
        client went away or a stop signal arrived first (exit 0).
    """
    try:
        while not stop.count:
            if dispatcher.state not in _OPENING_STATES:
                return Handover()
            frame = framer.next_frame()
            if frame is NEED_DATA:
                if framer.at_eof:
                    return None
                with stop.interrupting():
                    chunk = os.read(in_fd, READ_CHUNK_BYTES)
                if chunk:
                    framer.receive_data(chunk)
                else:
                    framer.receive_eof()
                continue
            action = dispatcher.handle_frame(frame)
            if isinstance(action, StartCall):
                return Handover(action)
            # Nothing is in flight yet, so a cancellation has nothing to cancel.
            if isinstance(action, Send):
                with stop.interrupting():
                    _write_all(out_fd, encode(action.message))
    except (_Stopped, BrokenPipeError, ConnectionError):
        return None
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def serve(
    dispatcher: Dispatcher,
    guardrails: Guardrails,
    *,
    in_fd: int,
    out_fd: int,
    framer: LineFramer | None = None,
    stop: StopSignals | None = None,
    handover: Handover | None = None,
    grace: float | None = None,
    audit: AuditTrail | None = None,
) -> None:
    """Serve the session on the event loop until it ends.

    Args:
        dispatcher: The session's protocol state machine.
        guardrails: The limits every call passes.
        in_fd: The descriptor requests arrive on (owned from now on).
        out_fd: The descriptor responses go to (owned from now on).
        framer: The framer the handshake phase used; a new one when None.
        stop: The handshake phase's signal handlers; signals they counted are acted on as
            soon as the session's own handlers are installed.
        handover: Where the handshake phase stopped (a call it read and did not start).
        grace: How long calls in flight may finish after input ends or a first signal;
            the design document's 5 s when None.
        audit: Where each call is recorded; nothing is recorded when None.
    """
    from mcp_server_suite.core import _session  # noqa: PLC0415  # The event loop's half.

    await _session.serve_session(
        dispatcher,
        guardrails,
        in_fd=in_fd,
        out_fd=out_fd,
        framer=framer if framer is not None else LineFramer(),
        first_call=None if handover is None else handover.first_call,
        early_signals=()
        if stop is None or stop.last is None
        else (stop.last,) * min(stop.count, 2),
        grace=_session.DRAIN_GRACE_S if grace is None else grace,
        audit=audit,
    )
