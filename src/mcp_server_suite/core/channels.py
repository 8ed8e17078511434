"""What the event loop reads requests from and writes responses to: the descriptors by type.

Rules:

1. Descriptors are served by what they are (`core.stdio.served_by_transports`): pipes
   through asyncio's pipe transports, a connected socket (systemd socket activation passes
   one socket as stdin and stdout) through one socket transport, and regular files,
   terminals and other character devices through plain blocking I/O with a reader thread,
   because non-blocking mode cannot be set on them safely and epoll refuses some of them
   (`/dev/null`, systemd's `StandardInput=null`).
2. Every channel has one interface (`Channel`): `read` a chunk (empty at the end of input,
   or when reading fails), `write_nowait` what it takes, `wait_writable` while its buffer is
   above `WRITE_HIGH_WATER_BYTES`, and `ChannelClosed` once the client is gone.
"""

import asyncio
import logging
import os
import queue
import socket
import stat
import threading
from collections.abc import Callable
from typing import Final, Protocol

from mcp_server_suite.core.stdio import (
    READ_CHUNK_BYTES,
    read_input,
    served_by_transports,
    write_all,
)

__all__ = ["READER_RETRY_S", "WRITE_HIGH_WATER_BYTES", "Channel", "ChannelClosed", "open_channel"]

logger = logging.getLogger(__name__)

# The transport's own buffer pauses writers above this many bytes. 256 KiB holds a few
# typical results while keeping a stalled client from growing the buffer much further.
WRITE_HIGH_WATER_BYTES: Final = 256 * 1024

# How often a channel whose reader thread could not start tries again: a limit on threads is
# lifted by another process ending or by an operator, on a human time scale, and a try is
# one failed system call.
READER_RETRY_S: Final = 0.5


class ChannelClosed(Exception):
    """The client end of the stream is gone."""


class _FlowControl(Protocol):
    @property
    def lost(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    async def wait_writable(self) -> None: ...


class Channel(Protocol):
    """A session's two directions (rule 2)."""

    @property
    def writable(self) -> bool: ...

    @property
    def buffered(self) -> int: ...

    async def read(self) -> bytes: ...

    def write_nowait(self, data: memoryview) -> None: ...

    async def wait_writable(self) -> None: ...

    async def aclose(self) -> None: ...


class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control for an asyncio write transport: writers wait while it is paused."""

    def __init__(self) -> None:
        self._writable = asyncio.Event()
        self._writable.set()
        self.lost = False

    @property
    def paused(self) -> bool:
        return not self._writable.is_set()

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

    @property
    def writable(self) -> bool:
        return not (self._protocol.paused or self._protocol.lost or self._transport.is_closing())

    @property
    def buffered(self) -> int:
        return 0 if self._protocol.lost else self._transport.get_write_buffer_size()

    async def read(self) -> bytes:
        try:
            return await self._reader.read(READ_CHUNK_BYTES)
        except (ConnectionError, OSError):
            return b""

    def write_nowait(self, data: memoryview) -> None:
        if self._protocol.lost or self._transport.is_closing():
            raise ChannelClosed
        self._transport.write(data)

    async def wait_writable(self) -> None:
        await self._protocol.wait_writable()

    async def aclose(self) -> None:
        self._transport.close()
        if self._extra_close is not None:
            self._extra_close()


class _ThreadChannel:
    """Blocking I/O for regular files and terminals: a daemon thread reads ahead one chunk.

    The reader thread is a daemon on purpose: a read blocked on a terminal cannot be
    interrupted, and it must not keep the process alive after the session has ended. When
    the system refuses the process a thread (a pids or memory limit), reading waits and tries
    again every `READER_RETRY_S`, while the rest of the session (calls in flight, signals)
    goes on.

    Output to a terminal is written by a thread of its own (`_TerminalWriter`): a terminal
    that stops taking output (flow control, a pseudo-terminal whose other side does not
    read) would otherwise hold the event loop in a write, where no signal can end it.
    Regular files and other devices never wait for a reader, and are written at once.
    """

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self._in_fd = in_fd
        self._out_fd = out_fd
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)
        self._wanted = threading.Semaphore(1)
        self._closed = False
        self._reading = self._start_reader()
        self._writer = _TerminalWriter.start(out_fd, self._loop) if os.isatty(out_fd) else None

    def _start_reader(self) -> bool:
        try:
            threading.Thread(target=self._pump, name="stdin-reader", daemon=True).start()
        except RuntimeError as exc:
            logger.warning(
                "could not start the input's reader thread (%s); trying again every %.1f s",
                exc,
                READER_RETRY_S,
            )
            return False
        return True

    @property
    def writable(self) -> bool:
        # Plain writes block until they are done, so the channel is always ready for the
        # next one; a terminal's writer takes more until it holds its high-water mark.
        writer = self._writer
        return not self._closed and (writer is None or writer.held < WRITE_HIGH_WATER_BYTES)

    @property
    def buffered(self) -> int:
        return 0 if self._writer is None else self._writer.held

    def _pump(self) -> None:
        while True:
            # One chunk is read ahead at most: reading waits until the last one is consumed.
            self._wanted.acquire()
            chunk = read_input(self._in_fd)
            try:
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
            except RuntimeError:  # pragma: no cover - the loop closed while a read was pending
                return
            if not chunk:
                return

    async def read(self) -> bytes:
        while not self._reading:
            await asyncio.sleep(READER_RETRY_S)
            self._reading = self._start_reader()
        chunk = await self._chunks.get()
        if chunk:
            self._wanted.release()
        return chunk

    def write_nowait(self, data: memoryview) -> None:
        if self._closed:
            raise ChannelClosed
        if self._writer is not None:
            if self._writer.failed:
                self._closed = True
                raise ChannelClosed
            self._writer.write(bytes(data))
            return
        try:
            write_all(self._out_fd, data)
        except ConnectionError:
            self._closed = True
            raise ChannelClosed from None

    async def wait_writable(self) -> None:
        if self._writer is not None and not self._closed:
            await self._writer.wait_below(WRITE_HIGH_WATER_BYTES)
            self._closed = self._writer.failed
        if self._closed:
            raise ChannelClosed

    async def aclose(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        else:
            os.close(self._out_fd)


class _TerminalWriter:
    """Writes to a terminal from a daemon thread, so the event loop never waits for it.

    The thread owns the descriptor and closes it when it ends: a write it still blocks in
    when the session ends (a terminal that never takes output again) must not outlive the
    descriptor's number, which the process could reuse for another file.
    """

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        self._loop = loop
        self._pieces: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._progress = asyncio.Event()
        # Bytes handed over and not yet written, and whether a write failed: the loop's.
        self.held = 0
        self.failed = False

    @classmethod
    def start(cls, fd: int, loop: asyncio.AbstractEventLoop) -> "_TerminalWriter | None":
        """A writer whose thread runs; None when the system refused a thread (the channel
        then writes itself, as it does to a file)."""
        writer = cls(fd, loop)
        try:
            threading.Thread(target=writer._run, name="stdout-writer", daemon=True).start()
        except RuntimeError as exc:
            logger.warning("could not start the terminal's writer thread (%s)", exc)
            return None
        return writer

    def write(self, data: bytes) -> None:
        self.held += len(data)
        self._pieces.put(data)

    async def wait_below(self, limit: int) -> None:
        while self.held >= limit and not self.failed:
            self._progress.clear()
            await self._progress.wait()

    def close(self) -> None:
        self._pieces.put(None)

    def _run(self) -> None:
        try:
            while (data := self._pieces.get()) is not None:
                try:
                    write_all(self._fd, data)
                except ConnectionError:
                    self._loop.call_soon_threadsafe(self._report, 0, True)
                    return
                self._loop.call_soon_threadsafe(self._report, len(data), False)
        except RuntimeError:  # The loop closed while a write was blocked: nobody waits.
            return
        finally:
            os.close(self._fd)

    def _report(self, written: int, failed: bool) -> None:
        self.held -= written
        self.failed = self.failed or failed
        self._progress.set()


async def open_channel(in_fd: int, out_fd: int) -> Channel:
    loop = asyncio.get_running_loop()
    if not served_by_transports(in_fd, out_fd):
        return _ThreadChannel(in_fd, out_fd)
    in_stat = os.fstat(in_fd)
    out_stat = os.fstat(out_fd)
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

    @property
    def paused(self) -> bool:
        return self._flow.paused

    def pause_writing(self) -> None:
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        self._flow.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._flow.connection_lost(exc)
        super().connection_lost(exc)

    async def wait_writable(self) -> None:
        await self._flow.wait_writable()
