"""The shell's third phase: the asyncio session, from the first call that needs an event loop.

Imported only once the blocking phases have handed over, so that start-up does not pay for
the event loop. It continues the session from exactly where they stopped (`core.stdio`).

Rules:

1. One `asyncio.TaskGroup` owns every task of the session. Each `tools/call` is a child task
   that runs the guardrails; nothing outlives the session.
2. Backpressure: every write waits while the output buffer is above its high-water mark,
   and the read loop waits for the output to drain before it reads more. A client that
   stops reading stops the server reading, instead of responses queueing without bound
   (the accounting is `core.backpressure`'s).
3. Shutdown: end of input, SIGINT and SIGTERM stop the reading and give calls in flight a
   grace period (`core.stdio.DRAIN_GRACE_S`); a second signal, or the end of the grace
   period, cancels them. A failed write means the client is gone: calls are cancelled at
   once. Every path exits 0.
4. The descriptors are served by type (`core.channels`).
"""

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import logging
import signal
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from mcp_server_suite.audit.record import CANCELLED, Crashed, Outcome, Refused, Succeeded
from mcp_server_suite.audit.trail import AuditTrail
from mcp_server_suite.core.backpressure import Held, OutputQueue
from mcp_server_suite.core.channels import Channel, ChannelClosed, open_channel
from mcp_server_suite.core.framing import NEED_DATA, FrameTooLarge, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.registry import ToolOutput, ToolSpec
from mcp_server_suite.core.server import CancelCall, Dispatcher, Send, StartCall
from mcp_server_suite.core.stdio import DRAIN_GRACE_S, Handover, StopSignals
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import RequestId, ToolFailure, new_correlation_id
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.workers import stop_workers

__all__ = ["WRITE_CHUNK_BYTES", "serve"]

logger = logging.getLogger(__name__)

# Responses are handed to the transport in pieces of at most this size, so the transport
# holds no more than its high-water mark plus one piece: a 13 MiB response is never copied
# whole into its buffer while the response itself still waits in the queue.
WRITE_CHUNK_BYTES: Final = 256 * 1024

# glibc's `M_MMAP_THRESHOLD` (malloc.h), and the value it starts at: blocks of 128 KiB and
# more get a mapping of their own, which goes back to the system when the block is freed.
_M_MMAP_THRESHOLD: Final = -3
_MMAP_THRESHOLD_BYTES: Final = 128 * 1024

# While the session ends, the output is checked this often for having reached the client
# (the transport reports only its high-water crossings, not its emptying).
_FLUSH_POLL_S: Final = 0.01


@dataclasses.dataclass(frozen=True, slots=True)
class _Staged:
    """A successful reply ready to send: its bytes, how it would wait, and whether it fits."""

    data: memoryview
    held: Held | None
    fits: bool


class _Output:
    """The write side of a session: the queue of responses, its writer, and the gate.

    A response is handed to the channel at once when nothing is queued and the channel is
    writable (the common case: one system call, no task switch); otherwise it is queued
    (`core.backpressure`) and the writer task hands it over piece by piece as the client
    reads. The gate holds tools back, first come, first served, while the responses waiting
    are at their bound.

    Args:
        channel: Where the responses go.
        on_closed: Called once when a write finds the client gone.
    """

    def __init__(self, channel: Channel, on_closed: Callable[[], None]) -> None:
        self._channel = channel
        self._queue = OutputQueue()
        self._on_closed = on_closed
        self._gate: deque[asyncio.Future[None]] = deque()
        self._changed = asyncio.Event()
        self._closed = False

    @property
    def held(self) -> int:
        """Bytes the queued responses hold."""
        return self._queue.held

    def send(self, data: "bytes | _Staged") -> None:
        """Send encoded responses (or a staged reply), queued if need be; never waits."""
        if self._closed:
            return
        if isinstance(data, _Staged) and data.held is not None and self._queue:
            self._queue.append(data.held)
            self._pulse()
            return
        rest = self._write_at_once(data.data if isinstance(data, _Staged) else memoryview(data))
        if rest:
            self._queue.push(rest)
            self._pulse()

    def stage(self, data: bytes) -> "_Staged":
        """Prepare a call's successful reply for sending, and tell whether it fits the bound.

        Nothing is sent yet: the caller decides on the reply (a refusal instead, when it does
        not fit), then hands the staged reply, or the refusal, to `send`.
        """
        view = memoryview(data)
        if self._closed or (not self._queue and self._channel.writable):
            # It goes at once, so nothing waits before it and it fits whatever its size.
            return _Staged(view, None, fits=True)
        held = self._queue.hold(view)
        return _Staged(view, held, fits=self._queue.fits(held))

    async def run(self) -> None:
        """The writer task: hand queued responses to the channel as it takes them."""
        while not self._closed:
            if not self._queue:
                await self._changed.wait()
                continue
            try:
                await self._channel.wait_writable()
                self._channel.write_nowait(self._queue.take(WRITE_CHUNK_BYTES))
            except ChannelClosed:
                self._close()
                return
            self._admit_waiting()

    async def wait_drained(self) -> None:
        """Wait until nothing is queued and the channel takes more at once.

        Calls waiting at the gate do not hold the read loop back: pings and cancellations
        must still be read, and the gate is bounded.
        """
        while not self._closed and self._queue:
            await self._changed.wait()
        if not self._closed:
            await self._channel.wait_writable()

    def has_room(self) -> bool:
        """Whether a tool may run now: nothing waits at the gate, and the queue has room."""
        return not self._gate and (self._closed or self._queue.may_start())

    async def wait_for_room(self) -> None:
        """Wait until a tool may run: the responses waiting are below their bound."""
        if self.has_room():
            return
        room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._gate.append(room)
        try:
            await room
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self._gate.remove(room)
            raise

    async def flush(self, until: float, stop: asyncio.Event) -> None:
        """Wait until every response has reached the client, or until `until` or `stop`."""
        loop = asyncio.get_running_loop()
        while not self._closed and not stop.is_set() and (self._queue or self._channel.buffered):
            if loop.time() >= until:
                return
            await asyncio.sleep(_FLUSH_POLL_S)

    def _write_at_once(self, view: memoryview) -> memoryview:
        # What the channel takes now: the first piece, when nothing waits before it.
        if self._queue or not self._channel.writable:
            return view
        try:
            self._channel.write_nowait(view[:WRITE_CHUNK_BYTES])
        except ChannelClosed:
            self._close()
            return view[:0]
        return view[WRITE_CHUNK_BYTES:]

    def _admit_waiting(self) -> None:
        while self._gate and self._queue.may_start():
            room = self._gate.popleft()
            if not room.done():
                room.set_result(None)
        self._pulse()

    def _pulse(self) -> None:
        # Every waiter wakes and checks its own condition again.
        self._changed.set()
        self._changed.clear()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.clear()
            self._changed.set()
            # Nothing will ever be written again: the tools waiting may run (and be cancelled).
            for room in self._gate:
                if not room.done():
                    room.set_result(None)
            self._gate.clear()
            self._on_closed()


class _Session:
    """One client session over one channel."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        guardrails: Guardrails,
        channel: Channel,
        framer: LineFramer,
        grace: float,
        *,
        audit: AuditTrail,
        first_call: StartCall | None,
        unsent: bytes = b"",
    ) -> None:
        self._audit = audit
        self._dispatcher = dispatcher
        self._first_call = first_call
        self._unsent = unsent
        self._framer = framer
        self._guardrails = guardrails
        self._channel = channel
        self._grace = grace
        self._output = _Output(channel, self._client_gone)
        # Each tool's spec with its run behind the gate, made once per tool.
        self._gated: dict[str, tuple[ToolSpec[Any, Any], ToolSpec[Any, Any]]] = {}
        self._calls: dict[RequestId, asyncio.Task[None]] = {}
        self._stop_reading = asyncio.Event()
        self._cancel_now = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._signals = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as group:
            self._group = group
            writer = group.create_task(self._output.run(), name="writer")
            if self._unsent:
                # Answers the blocking phase wrote only in part: they leave before any other.
                self._output.send(self._unsent)
                self._unsent = b""
            if self._first_call is not None:
                # Before any frame read after it: a cancellation right behind it must find it.
                self._act(self._first_call)
            reader = group.create_task(self._read_loop(), name="read-loop")
            await self._stop_reading.wait()
            # Everything that follows fits in one grace period from here.
            deadline = loop.time() + self._grace
            reader.cancel()
            self._dispatcher.begin_closing()
            await self._drain(deadline)
            for task in list(self._calls.values()):
                task.cancel()
            if not self._cancel_now.is_set():
                closing = self._dispatcher.close_subscriptions()
                if closing:
                    self._output.send(b"".join(encode(send.message) for send in closing))
                await self._output.flush(deadline, self._cancel_now)
            writer.cancel()

    def on_signal(self, signum: int) -> None:
        """First signal: stop reading and drain. Second: cancel calls in flight."""
        self._signals += 1
        logger.warning(
            "received %s, %s",
            signal.Signals(signum).name,
            "draining calls in flight" if self._signals == 1 else "cancelling calls",
        )
        self._stop_reading.set()
        if self._signals > 1:
            self._cancel_now.set()

    async def _drain(self, deadline: float) -> None:
        if self._cancel_now.is_set() or self._idle.is_set():
            return
        idle = asyncio.ensure_future(self._idle.wait())
        forced = asyncio.ensure_future(self._cancel_now.wait())
        try:
            await asyncio.wait(
                {idle, forced},
                timeout=max(deadline - asyncio.get_running_loop().time(), 0),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            idle.cancel()
            forced.cancel()
            # A cancelled task is still pending until it has run once more: wait for both,
            # so no task of the session outlives `serve`.
            await asyncio.wait({idle, forced})

    async def _read_loop(self) -> None:
        framer = self._framer
        try:
            while True:
                # Frames already buffered (the blocking phase may leave some) come first.
                replies = [
                    reply
                    for frame in _frames(framer)
                    if (reply := self._act(self._dispatcher.handle_frame(frame))) is not None
                ]
                if replies:
                    # One write for every inline answer to one read: a client that pipelines
                    # requests gets its answers in one system call, not one each.
                    self._output.send(b"".join(replies))
                if framer.at_eof:
                    logger.info("end of input")
                    return
                # Backpressure: while responses wait for the client, stdin is not read.
                await self._output.wait_drained()
                chunk = await self._channel.read()
                if chunk:
                    framer.receive_data(chunk)
                else:
                    framer.receive_eof()
        except ChannelClosed:
            self._client_gone()
        finally:
            self._stop_reading.set()

    def _act(self, action: Send | StartCall | CancelCall | None) -> bytes | None:
        """Carry out one action; return the bytes of an inline answer to write."""
        if isinstance(action, Send):
            return encode(action.message)
        if isinstance(action, StartCall):
            self._idle.clear()
            task = self._group.create_task(
                self._call(action), name=f"tools/call {action.tool.description.name}"
            )
            # A task cancelled before its first step never runs `_call`, cleanup included (a
            # cancel in the same read as its call does this), so its end is also watched here.
            task.add_done_callback(functools.partial(self._release_unstarted, action))
            self._calls[action.request_id] = task
        elif isinstance(action, CancelCall):
            running = self._calls.get(action.request_id)
            if running is not None:
                running.cancel()
        return None

    async def _call(self, action: StartCall) -> None:
        request_id = action.request_id
        name = action.tool.description.name
        started = self._audit.clock()
        outcome: Outcome
        staged = None
        try:
            # The first call of a tool loads its implementation (and Pydantic): the cost is
            # paid once, by the call that needs it, never at start-up.
            spec = self._behind_the_gate(action.tool.spec())
            output = await self._guardrails.invoke(spec, action.arguments)
        except ToolFailure as failure:
            outcome = Refused(failure.problem.code)
            reply = self._dispatcher.call_failed(request_id, failure.problem)
        except asyncio.CancelledError:
            self._audit.record(action, CANCELLED, started)
            self._abandoned(request_id)
            raise
        except Exception:
            correlation_id = new_correlation_id()
            logger.exception(
                "tool %s failed unexpectedly (correlation_id=%s)", name, correlation_id
            )
            outcome = Crashed(correlation_id)
            reply = self._dispatcher.call_crashed(request_id, correlation_id)
        else:
            outcome = Succeeded.of(output.structured, output.text)
            reply = self._dispatcher.call_succeeded(request_id, output.structured, output.text)
            # The reply holds what it needs of the result; the rest goes before it is encoded.
            del output
            staged = self._output.stage(encode(reply.message))
            if not staged.fits:
                size = len(staged.data)
                logger.warning("dropped a %d-byte result the client is not reading", size)
                problem = _dropped(size)
                outcome = Refused(problem.code)
                reply, staged = self._dispatcher.reply_withheld(reply, problem), None
        # The audit hook: one record per call, after its reply is decided (a dropped result
        # included) and before it is written; a reply the trail could not record is withheld.
        if not self._audit.record(action, outcome, started):
            reply, staged = self._dispatcher.reply_withheld(reply, self._audit.refusal), None
        self._answer(reply, staged)

    def _behind_the_gate(self, spec: ToolSpec[Any, Any]) -> ToolSpec[Any, Any]:
        """The tool's spec, its `run` waiting at the output gate first (backpressure).

        The wait is inside the call's concurrency slot and deadline, where the tool would
        start working: while the client does not read, calls stop there, the limiter holds
        the rest back, and nothing is computed that nobody takes. The tool's inline shortcut
        (`ToolSpec.run_inline`) never waits, so while the gate is closed it stands aside and
        the call takes the full path, which answers the same (rule 6 of `core.registry`).
        """
        known = self._gated.get(spec.name)
        if known is not None and known[0] is spec:
            return known[1]
        run, inline = spec.run, spec.run_inline
        has_room, wait_for_room = self._output.has_room, self._output.wait_for_room

        async def gated_run(params: Any) -> Any:
            await wait_for_room()
            return await run(params)

        def gated_inline(arguments: Mapping[str, Any]) -> ToolOutput | None:
            return inline(arguments) if inline is not None and has_room() else None

        gated = dataclasses.replace(
            spec, run=gated_run, run_inline=None if inline is None else gated_inline
        )
        self._gated[spec.name] = (spec, gated)
        return gated

    def _answer(self, reply: Send, staged: _Staged | None = None) -> None:
        """Write a call's reply: it is decided, whatever happens to it from here on."""
        self._finished(reply.message["id"])
        self._output.send(staged if staged is not None else encode(reply.message))

    def _abandoned(self, request_id: RequestId) -> None:
        self._dispatcher.call_abandoned(request_id)
        self._finished(request_id)

    def _release_unstarted(self, action: StartCall, task: asyncio.Task[None]) -> None:
        # Still registered only if `_call` never reached its own cleanup.
        request_id = action.request_id
        if self._calls.get(request_id) is task:
            self._audit.record(action, CANCELLED, None)
            self._dispatcher.call_abandoned(request_id)
            self._finished(request_id)

    def _finished(self, request_id: RequestId) -> None:
        self._calls.pop(request_id, None)
        if not self._calls:
            self._idle.set()

    def _client_gone(self) -> None:
        logger.info("the client stopped reading: cancelling calls in flight")
        self._stop_reading.set()
        self._cancel_now.set()


def _dropped(size: int) -> Problem:
    return Problem.of(
        MCPErrorCode.INTERNAL_ERROR,
        f"The result ({size} bytes) was ready, but earlier responses still wait for the "
        "client to read them. Read the responses, then retry the call.",
        metadata={"retryable": True},
    )


def _frames(framer: LineFramer) -> Iterator[bytes | FrameTooLarge]:
    while (frame := framer.next_frame()) is not NEED_DATA:
        yield frame


def _return_large_blocks_to_the_system() -> bool:
    """Keep glibc from holding on to the memory of large responses once they are written.

    glibc raises its mmap threshold each time a large block is freed, so the next large
    blocks come from the heap, where freed space fragments and is not returned. A session
    that built a few 13 MiB responses would then keep their memory long after sending them,
    and the output bound would not bound the process: measured, 80 reads of 1 MiB of NUL
    bytes to a client that did not read peaked at 159 MiB instead of 98. Setting the
    threshold fixes it at its starting value (128 KiB) and turns the adjustment off. Where the
    C library is not glibc, nothing is done.

    Returns:
        Whether the C library took the setting.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the process already runs on
    except (OSError, AttributeError):  # pragma: no cover - no dynamic C library, or not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES))


async def serve(
    dispatcher: Dispatcher,
    guardrails: Guardrails,
    *,
    in_fd: int,
    out_fd: int,
    framer: LineFramer | None = None,
    stop: StopSignals | None = None,
    handover: Handover | None = None,
    grace: float = DRAIN_GRACE_S,
    audit: AuditTrail | None = None,
) -> None:
    """Serve the session on the event loop until it ends.

    Args:
        dispatcher: The session's protocol state machine.
        guardrails: The limits every call passes.
        in_fd: The descriptor requests arrive on (owned from now on).
        out_fd: The descriptor responses go to (owned from now on).
        framer: The framer the blocking phases used, with whatever they left buffered in
            it; a new one when None.
        stop: The stop-signal handlers of the blocking phases; signals they counted are
            acted on as soon as the session's own handlers are installed.
        handover: Where the blocking phases stopped: a call read and left unstarted, which
            starts first, and answers not yet written, which leave before anything.
        grace: How long calls in flight may finish, and their responses reach the client,
            after input ends or a first signal.
        audit: Where each call is recorded; nothing is recorded when None.
    """
    loop = asyncio.get_running_loop()
    _return_large_blocks_to_the_system()
    channel = await open_channel(in_fd, out_fd)
    handover = Handover() if handover is None else handover
    session = _Session(
        dispatcher,
        guardrails,
        channel,
        LineFramer() if framer is None else framer,
        grace,
        first_call=handover.first_call,
        unsent=handover.unsent,
        audit=AuditTrail(None) if audit is None else audit,
    )
    installed: deque[signal.Signals] = deque()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, session.on_signal, signum)
        installed.append(signum)
    if stop is not None and stop.last is not None:
        # At most two count: the second already cancels everything.
        for _ in range(min(stop.count, 2)):
            session.on_signal(stop.last)
    try:
        await session.run()
    finally:
        # Until the loop closes, a stop signal finds nothing left to stop: it is noted and
        # dropped instead of restoring the default action, which would kill the process
        # while it closes the tools' resources.
        for signum in installed:
            loop.add_signal_handler(signum, _after_the_session, signum)
        await channel.aclose()
        stop_workers()


def _after_the_session(signum: int) -> None:
    logger.debug("received %s after the session ended", signal.Signals(signum).name)
