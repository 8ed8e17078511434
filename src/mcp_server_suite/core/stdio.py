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

The session runs in up to three phases, the first two with plain blocking reads.

1. While the session is opening (no era chosen yet, or a legacy session before
   `initialize`), `answer_handshake` serves frames before anything else has loaded:
   nothing can run concurrently yet (`server/discover`, `initialize` and `ping` are
   answered inline, and calls are refused before `initialize`), so a client's handshake or
   discovery is answered before the guardrails or asyncio have even been imported. It ends
   when the session is ready for calls, or at the first call, which it hands over unstarted.
2. `serve_inline` then serves the ready session for as long as every frame can be answered
   at once: pings, `tools/list`, discovery, and calls a tool's shortcut answers without
   waiting (`core.inline`; a cached file read). Nothing is ever in flight, so nothing can
   need cancelling, a deadline or the output bound, and the answers to one read leave in
   one write. Its writes never block: the output is made non-blocking where the event loop
   would make it so (pipes, sockets). It hands over to the event loop at the first call
   that needs it (unstarted), the first write the client does not take at once (the rest
   unwritten), or at the end when subscriptions are open (their closing results need the
   grace of rule 4); otherwise the session ends here, on end of input, a signal or a
   client gone.
3. `serve` runs the asyncio session (`core._session`, rules 2 to 5) with the same
   dispatcher and framer, from exactly where the blocking phases stopped: no byte the
   client sent and no byte of an answer is lost between them.

A stop signal or a client gone during the first two phases ends the session (the second
hands over what it could not write, which then gets the grace), even while a read or the
first phase's write is blocked.

Calling order: `claim_stdio` and `StopSignals()`, then `answer_handshake`, then, if it
returned a `Handover`, `serve_inline` with its first call, then, if that returned a
`Handover`, `serve` with it; then `StopSignals.ignore` while the process exits.
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import stat
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Final

from mcp_server_suite.core.busy_poll import ready_within
from mcp_server_suite.core.framing import NEED_DATA, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import CancelCall, Dispatcher, Send, SessionState, StartCall

if TYPE_CHECKING:
    from mcp_server_suite.audit.trail import AuditTrail
    from mcp_server_suite.core.inline import InlineCalls
    from mcp_server_suite.guardrails.pipeline import Guardrails

__all__ = [
    "READ_CHUNK_BYTES",
    "Handover",
    "StopSignals",
    "answer_handshake",
    "claim_stdio",
    "serve",
    "serve_inline",
    "served_by_transports",
]

logger = logging.getLogger(__name__)

# The design document's read size: one 64 KiB chunk on top of the frame ceiling bounds the
# memory a client can make the reader hold.
READ_CHUNK_BYTES: Final = 64 * 1024

# The inline phase writes its answers once they reach this many bytes, even in the middle of
# a read: the asyncio session's piece size, so one read of small requests that each ask for a
# large answer never holds more than one piece and one answer.
INLINE_BATCH_BYTES: Final = 256 * 1024

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

# The states the blocking phase serves: before them nothing can be in flight.
_OPENING_STATES: Final = frozenset({SessionState.OPENING, SessionState.AWAITING_INIT})


def served_by_transports(in_fd: int, out_fd: int) -> bool:
    """Whether the event loop serves these descriptors with its transports (rule 5).

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
        self._interrupting = _Interrupting(self)
        self._previous = {signum: signal.signal(signum, self._handle) for signum in _STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum)
        if self._reading:
            raise _Stopped

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
            raise _Stopped

    def __exit__(self, *exc_info: object) -> None:
        self._signals._reading = False


@dataclass(frozen=True, slots=True)
class Handover:
    """Where the blocking phase stopped: the event loop continues the session from here.

    Attributes:
        first_call: A call the phase read but could not run; the session starts it before
            it reads another frame.
        unsent: Answers the phase could not write without waiting; they leave first.
    """

    first_call: StartCall | None = None
    unsent: bytes = b""


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


def serve_inline(
    calls: InlineCalls,
    dispatcher: Dispatcher,
    framer: LineFramer,
    stop: StopSignals,
    *,
    in_fd: int,
    out_fd: int,
    first_call: StartCall | None = None,
) -> Handover | None:
    """Serve the ready session with blocking reads while every frame is answered at once.

    Args:
        calls: Answers the calls that need no event loop, and records them.
        dispatcher: The session's protocol state machine, ready for calls.
        framer: The session's framer; frames after the phase stay buffered in it.
        stop: The stop-signal handlers installed for the blocking phases.
        in_fd: The descriptor requests arrive on.
        out_fd: The descriptor responses go to.
        first_call: The call the handshake phase handed over, if any.

    Returns:
        A `Handover` when `serve` must continue the session; None when it ended here.
    """
    return _InlinePhase(calls, dispatcher, framer, stop, in_fd=in_fd, out_fd=out_fd).run(first_call)


class _InlinePhase:
    """`serve_inline`'s loop and what it holds."""

    def __init__(
        self,
        calls: InlineCalls,
        dispatcher: Dispatcher,
        framer: LineFramer,
        stop: StopSignals,
        *,
        in_fd: int,
        out_fd: int,
    ) -> None:
        self._calls = calls
        self._dispatcher = dispatcher
        self._framer = framer
        self._stop = stop
        self._in_fd = in_fd
        self._replies = _Replies(out_fd, stop, nonblocking=served_by_transports(in_fd, out_fd))
        self._inputs = select.poll()
        self._inputs.register(in_fd, select.POLLIN)

    def run(self, first_call: StartCall | None) -> Handover | None:
        try:
            return self._serve(first_call)
        except _Stopped:
            return self._ended()
        except (BrokenPipeError, ConnectionError):
            logger.info("the client went away")
            return None
        finally:
            self._calls.audit.write_waiting()

    def _serve(self, first_call: StartCall | None) -> Handover | None:
        framer, replies = self._framer, self._replies
        if first_call is not None and (handover := self._act(first_call)) is not None:
            return handover
        while not self._stop.count:
            frame = framer.next_frame()
            if frame is not NEED_DATA:
                handover = self._act(self._dispatcher.handle_frame(frame))
                if handover is not None:
                    return handover
                continue
            if not replies.write():
                return Handover(unsent=replies.unsent())
            if framer.at_eof:
                logger.info("end of input")
                break
            _write_records_unless_input(self._inputs, self._calls.audit, self._stop)
            with self._stop.interrupting():
                chunk = _read_chunk(self._in_fd, self._inputs)
            if chunk:
                framer.receive_data(chunk)
            else:
                framer.receive_eof()
        return self._ended()

    def _act(self, action: Send | StartCall | CancelCall | None) -> Handover | None:
        replies = self._replies
        if isinstance(action, Send):
            replies.add(encode(action.message))
        elif isinstance(action, StartCall):
            reply = self._calls.answer(action)
            if reply is None:
                # It needs the event loop: the answers before it leave first, from there.
                return Handover(action, replies.unsent())
            replies.add(reply)
        # A cancellation finds nothing in flight here: every call has been answered.
        if replies.size >= INLINE_BATCH_BYTES and not replies.write():
            return Handover(unsent=replies.unsent())
        return None

    def _ended(self) -> Handover | None:
        if self._dispatcher.subscriptions or self._replies.size:
            # Their closing results and what is left to write get the session's grace.
            return Handover(unsent=self._replies.unsent())
        if self._stop.last is not None:
            logger.warning(
                "received %s, nothing in flight: ending the session", self._stop.last.name
            )
        return None


class _Replies:
    """The inline phase's answers to one read, written together.

    Where the event loop would make the output non-blocking (pipes, sockets), so is it here,
    and a write never waits: what the client does not take at once is handed over. Elsewhere
    (a terminal, a regular file, a pipe written beside a regular file's input) writes block,
    as they do on the event loop, and a stop signal interrupts them: the rest is dropped,
    since the client that asked to stop was not reading it.
    """

    def __init__(self, fd: int, stop: StopSignals, *, nonblocking: bool) -> None:
        self._fd = fd
        self._stop = stop
        self._nonblocking = nonblocking
        self._parts: list[bytes] = []
        self.size = 0
        if nonblocking:
            os.set_blocking(fd, False)

    def add(self, data: bytes) -> None:
        self._parts.append(data)
        self.size += len(data)

    def unsent(self) -> bytes:
        return b"".join(self._parts)

    def write(self) -> bool:
        """Write what waits, as far as the client takes it at once; whether all of it went."""
        if not self._parts:
            return True
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        if not self._nonblocking:
            self._parts, self.size = [], 0
            with self._stop.interrupting():
                _write_all(self._fd, data)
            return True
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        self._parts = [data[written:]] if written < len(data) else []
        self.size = len(data) - written
        return not self._parts


def _write_records_unless_input(inputs: select.poll, audit: AuditTrail, stop: StopSignals) -> None:
    # The records of the calls answered so far wait for more of them, as long as the trail
    # allows; once input is slower than that, they are written before the read blocks. Input
    # is first looked for awake (`busy_poll`), except while records are overdue. A signal may
    # interrupt the wait, never the write, which would lose the records.
    due = audit.written_by()
    if due is not None and due <= audit.clock():
        audit.write_waiting()
        due = None
    if ready_within(lambda: bool(inputs.poll(0))) or due is None:
        return
    left = due - audit.clock()
    if left > 0:
        with stop.interrupting():
            if inputs.poll(math.ceil(left * 1000)):
                return
    audit.write_waiting()


def _read_chunk(in_fd: int, inputs: select.poll) -> bytes:
    while True:
        try:
            return os.read(in_fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            # A socket that carries both directions shares the output's non-blocking mode:
            # wait until it is readable.
            inputs.poll()


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
        unsent=b"" if handover is None else handover.unsent,
        early_signals=()
        if stop is None or stop.last is None
        else (stop.last,) * min(stop.count, 2),
        grace=_session.DRAIN_GRACE_S if grace is None else grace,
        audit=audit,
    )
