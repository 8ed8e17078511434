"""The asyncio session: everything of the stdio shell that runs on the event loop.

A private part of `core.stdio`, imported only once the handshake has been answered, so that
start-up does not pay for the event loop. The rules are those of `core.stdio`; this module
holds rules 2 to 5 (one TaskGroup, backpressure, shutdown, descriptors served by type).
"""

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import stat
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Protocol

from mcp_server_suite.audit.record import CANCELLED, Crashed, Outcome, Refused, Succeeded
from mcp_server_suite.audit.trail import AuditTrail
from mcp_server_suite.core.framing import NEED_DATA, FrameTooLarge, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import CancelCall, Dispatcher, Send, StartCall
from mcp_server_suite.core.stdio import READ_CHUNK_BYTES
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import RequestId, ToolFailure, new_correlation_id
from mcp_server_suite.workers import stop_workers

__all__ = ["DRAIN_GRACE_S", "ChannelClosed", "serve_session"]

logger = logging.getLogger(__name__)

# The design document's drain period after EOF or the first signal.
DRAIN_GRACE_S: Final = 5.0

# Output above this many buffered bytes pauses writers and the read loop. 256 KiB holds a
# few typical results while keeping a stalled client from growing the buffer much further.
WRITE_HIGH_WATER_BYTES: Final = 256 * 1024

# On exit, buffered output is given this long to reach a client that has stopped reading.
FLUSH_TIMEOUT_S: Final = 2.0


class ChannelClosed(Exception):
    """The client end of the stream is gone."""


class _FlowControl(Protocol):
    @property
    def lost(self) -> bool: ...

    async def wait_writable(self) -> None: ...


class _Channel(Protocol):
    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    async def wait_writable(self) -> None: ...

    async def aclose(self) -> None: ...


class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control for an asyncio write transport: writers wait while it is paused."""

    def __init__(self) -> None:
        self._writable = asyncio.Event()
        self._writable.set()
        self.lost = False

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._writable.set()

    async def wait_writable(self) -> None:
        await self._writable.wait()
        if self.lost:
            raise ChannelClosed


class _StreamChannel:
    """Input from an asyncio `StreamReader`, output through an asyncio write transport."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        transport: asyncio.WriteTransport,
        flow: _FlowControl,
        extra_close: Callable[[], None] | None = None,
    ) -> None:
        self._reader = reader
        self._transport = transport
        self._protocol = flow
        self._extra_close = extra_close
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)

    async def read(self) -> bytes:
        try:
            return await self._reader.read(READ_CHUNK_BYTES)
        except (ConnectionError, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        if self._protocol.lost or self._transport.is_closing():
            raise ChannelClosed
        self._transport.write(data)
        await self._protocol.wait_writable()

    async def wait_writable(self) -> None:
        await self._protocol.wait_writable()

    async def aclose(self) -> None:
        if not self._protocol.lost:
            with contextlib.suppress(TimeoutError, ChannelClosed):
                async with asyncio.timeout(FLUSH_TIMEOUT_S):
                    while self._transport.get_write_buffer_size() and not self._protocol.lost:
                        await asyncio.sleep(0.01)
        self._transport.close()
        if self._extra_close is not None:
            self._extra_close()


class _ThreadChannel:
    """Blocking I/O for regular files and terminals: a daemon thread reads ahead one chunk.

    The reader thread is a daemon on purpose: a read blocked on a terminal cannot be
    interrupted, and it must not keep the process alive after the session has ended.
    """

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self._in_fd = in_fd
        self._out_fd = out_fd
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)
        self._wanted = threading.Semaphore(1)
        self._closed = False
        threading.Thread(target=self._pump, name="stdin-reader", daemon=True).start()

    def _pump(self) -> None:
        while True:
            # One chunk is read ahead at most: reading waits until the last one is consumed.
            self._wanted.acquire()
            try:
                chunk = os.read(self._in_fd, READ_CHUNK_BYTES)
            except OSError:
                chunk = b""
            try:
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
            except RuntimeError:  # pragma: no cover - the loop closed while a read was pending
                return
            if not chunk:
                return

    async def read(self) -> bytes:
        chunk = await self._chunks.get()
        if chunk:
            self._wanted.release()
        return chunk

    async def write(self, data: bytes) -> None:
        if self._closed:
            raise ChannelClosed
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._out_fd, view)
                view = view[written:]
        except OSError:
            self._closed = True
            raise ChannelClosed from None

    async def wait_writable(self) -> None:
        if self._closed:
            raise ChannelClosed

    async def aclose(self) -> None:
        self._closed = True
        os.close(self._out_fd)


def _is_stream_fd(mode: int) -> bool:
    # Not character devices: epoll refuses /dev/null (EPERM), which would leave the read
    # transport without a reader and the session waiting forever for input.
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _open_channel(in_fd: int, out_fd: int) -> _Channel:
    loop = asyncio.get_running_loop()
    in_stat = os.fstat(in_fd)
    out_stat = os.fstat(out_fd)
    terminal = os.isatty(in_fd) or os.isatty(out_fd)
    if terminal or not (_is_stream_fd(in_stat.st_mode) and _is_stream_fd(out_stat.st_mode)):
        return _ThreadChannel(in_fd, out_fd)
    reader = asyncio.StreamReader(limit=READ_CHUNK_BYTES)
    if stat.S_ISSOCK(in_stat.st_mode):
        # One socket carries both directions: a write pipe transport on it would read the
        # client's requests as a sign that the peer had closed.
        sock = socket.socket(fileno=in_fd)
        same_socket = (in_stat.st_dev, in_stat.st_ino) == (out_stat.st_dev, out_stat.st_ino)
        if same_socket:
            os.close(out_fd)
        transport, _ = await loop.connect_accepted_socket(
            lambda: _SocketProtocol(reader), sock=sock
        )
        protocol = transport.get_protocol()
        if not isinstance(protocol, _SocketProtocol):  # pragma: no cover - set just above
            raise TypeError("unexpected protocol")
        if same_socket:
            return _StreamChannel(reader, transport, protocol)
        write_transport, write_protocol = await loop.connect_write_pipe(
            _WriteProtocol, os.fdopen(out_fd, "wb", buffering=0)
        )
        return _StreamChannel(reader, write_transport, write_protocol, transport.close)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", buffering=0)
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        _WriteProtocol, os.fdopen(out_fd, "wb", buffering=0)
    )
    return _StreamChannel(reader, write_transport, write_protocol, read_transport.close)


class _SocketProtocol(asyncio.StreamReaderProtocol):
    """A stream reader protocol that also reports write flow control like `_WriteProtocol`."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._flow = _WriteProtocol()

    @property
    def lost(self) -> bool:
        return self._flow.lost

    def pause_writing(self) -> None:
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        self._flow.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._flow.connection_lost(exc)
        super().connection_lost(exc)

    async def wait_writable(self) -> None:
        await self._flow.wait_writable()


class _Session:
    """One client session over one channel."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        guardrails: Guardrails,
        channel: _Channel,
        framer: LineFramer,
        grace: float,
        *,
        audit: AuditTrail,
        first_call: StartCall | None,
    ) -> None:
        self._audit = audit
        self._dispatcher = dispatcher
        self._first_call = first_call
        self._framer = framer
        self._guardrails = guardrails
        self._channel = channel
        self._grace = grace
        self._calls: dict[RequestId, asyncio.Task[None]] = {}
        self._stop_reading = asyncio.Event()
        self._cancel_now = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._signals = 0

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            if self._first_call is not None:
                # Before any frame read after it: a cancellation right behind it must find it.
                self._act(self._first_call)
            reader = group.create_task(self._read_loop(), name="read-loop")
            await self._stop_reading.wait()
            reader.cancel()
            self._dispatcher.begin_closing()
            await self._drain()
            for task in list(self._calls.values()):
                task.cancel()

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

    async def _drain(self) -> None:
        if self._cancel_now.is_set() or self._idle.is_set():
            return
        idle = asyncio.ensure_future(self._idle.wait())
        forced = asyncio.ensure_future(self._cancel_now.wait())
        try:
            await asyncio.wait(
                {idle, forced}, timeout=self._grace, return_when=asyncio.FIRST_COMPLETED
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
                # Frames already buffered (the handshake phase may leave some) come first.
                replies = [
                    reply
                    for frame in _frames(framer)
                    if (reply := self._act(self._dispatcher.handle_frame(frame))) is not None
                ]
                if replies:
                    # One write for every inline answer to one read: a client that pipelines
                    # requests gets its answers in one system call, not one each.
                    await self._channel.write(b"".join(replies))
                if framer.at_eof:
                    logger.info("end of input")
                    return
                await self._channel.wait_writable()
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
        started = self._audit.clock()
        outcome: Outcome
        try:
            # The first call of a tool loads its implementation (and Pydantic): the cost is
            # paid once, by the call that needs it, never at start-up.
            output = await self._guardrails.invoke(action.tool.spec(), action.arguments)
        except ToolFailure as failure:
            outcome = Refused(failure.problem.code)
            reply = self._dispatcher.call_failed(request_id, failure.problem)
        except asyncio.CancelledError:
            self._audit.record(action, CANCELLED, started)
            self._dispatcher.call_abandoned(request_id)
            self._finished(request_id)
            raise
        except Exception:
            correlation_id = new_correlation_id()
            logger.exception(
                "tool %s failed unexpectedly (correlation_id=%s)",
                action.tool.description.name,
                correlation_id,
            )
            outcome = Crashed(correlation_id)
            reply = self._dispatcher.call_crashed(request_id, correlation_id)
        else:
            outcome = Succeeded.of(output.structured, output.text)
            reply = self._dispatcher.call_succeeded(request_id, output.structured, output.text)
        # The audit hook: one record per call, after its reply is decided and before it is
        # written; a reply the trail could not record is withheld.
        if not self._audit.record(action, outcome, started):
            reply = self._dispatcher.reply_withheld(reply, self._audit.refusal)
        self._finished(request_id)
        try:
            await self._channel.write(encode(reply.message))
        except ChannelClosed:
            self._client_gone()

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


def _frames(framer: LineFramer) -> Iterator[bytes | FrameTooLarge]:
    while (frame := framer.next_frame()) is not NEED_DATA:
        yield frame


async def serve_session(
    dispatcher: Dispatcher,
    guardrails: Guardrails,
    *,
    in_fd: int,
    out_fd: int,
    framer: LineFramer,
    first_call: StartCall | None = None,
    early_signals: Sequence[signal.Signals] = (),
    grace: float = DRAIN_GRACE_S,
    audit: AuditTrail | None = None,
) -> None:
    """Serve one session over the given descriptors until it ends.

    Args:
        dispatcher: The session's protocol state machine.
        guardrails: The limits every call passes.
        in_fd: The descriptor requests arrive on (owned from now on).
        out_fd: The descriptor responses go to (owned from now on).
        framer: The framer, with whatever the handshake phase left buffered in it.
        first_call: A call the handshake phase read and left unstarted; it starts first.
        early_signals: Stop signals received before the session's handlers were installed.
        grace: How long calls in flight may finish after input ends or a first signal.
        audit: Where each call is recorded; nothing is recorded when None.
    """
    loop = asyncio.get_running_loop()
    channel = await _open_channel(in_fd, out_fd)
    trail = AuditTrail(None) if audit is None else audit
    session = _Session(
        dispatcher, guardrails, channel, framer, grace, first_call=first_call, audit=trail
    )
    installed: deque[signal.Signals] = deque()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, session.on_signal, signum)
        installed.append(signum)
    for signum in early_signals:
        session.on_signal(signum)
    try:
        await session.run()
    finally:
        await channel.aclose()
        stop_workers()
        for signum in installed:
            loop.remove_signal_handler(signum)
