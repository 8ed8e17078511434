"""The event loop's channels (`core.channels`), in-process over pipes."""

import asyncio
import contextlib
import os
import threading
import tty
from collections.abc import Iterator

import pytest

from mcp_server_suite.core import channels


async def test_a_reader_thread_that_cannot_start_is_tried_again(
    pipes: tuple[int, int, int, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pids or memory limit: the first tries fail, then the limit is lifted.
    client_out, server_in, server_out, _ = pipes
    refusals = [RuntimeError("can't start new thread")] * 2
    start = threading.Thread.start

    def refuse_then_start(thread: threading.Thread) -> None:
        if thread.name == "stdin-reader" and refusals:
            raise refusals.pop()
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_then_start)
    monkeypatch.setattr(channels, "READER_RETRY_S", 0.01)
    channel = channels._ThreadChannel(server_in, os.dup(server_out))
    os.write(client_out, b"a request\n")
    assert await asyncio.wait_for(channel.read(), 5) == b"a request\n"
    assert refusals == []
    assert "could not start the input's reader thread" in caplog.text
    os.close(client_out)
    assert await asyncio.wait_for(channel.read(), 5) == b""
    await channel.aclose()


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    """(the client's side, the server's side) of a pseudo-terminal in raw mode."""
    client, server = os.openpty()
    tty.setraw(server)
    yield client, server
    for fd in (client, server):
        with contextlib.suppress(OSError):
            os.close(fd)


def writable(channel: channels._ThreadChannel) -> bool:
    """The property, read afresh (mypy would keep it narrowed from the assertion before)."""
    return channel.writable


def drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    return data


async def test_a_terminal_is_written_by_a_thread_the_loop_never_waits_for(
    terminal: tuple[int, int],
) -> None:
    client, server = terminal
    channel = channels._ThreadChannel(os.dup(server), os.dup(server))
    assert channel._writer is not None
    # More than the terminal holds while nobody reads: the loop hands it over and goes on.
    data = b"x" * (2 * channels.WRITE_HIGH_WATER_BYTES)
    channel.write_nowait(memoryview(data))
    assert not channel.writable
    assert channel.buffered == len(data)
    waiting = asyncio.ensure_future(channel.wait_writable())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    received = b""
    while len(received) < len(data):
        received += drain(client)
        await asyncio.sleep(0.01)
    await asyncio.wait_for(waiting, 5)
    assert received == data
    assert writable(channel)
    await channel.aclose()
    with pytest.raises(channels.ChannelClosed):
        channel.write_nowait(memoryview(b"after the end"))


async def test_a_terminal_that_hangs_up_closes_the_channel(terminal: tuple[int, int]) -> None:
    client, server = terminal
    channel = channels._ThreadChannel(os.dup(server), os.dup(server))
    os.close(client)
    channel.write_nowait(memoryview(b"into the void\n"))
    # The writer thread reports the failed write (EIO) to the loop, which closes the channel.
    for _ in range(500):
        if channel._writer is not None and channel._writer.failed:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(channels.ChannelClosed):
        await channel.wait_writable()
    with pytest.raises(channels.ChannelClosed):
        channel.write_nowait(memoryview(b"again\n"))
    # The reader sees the hang-up as the end of input.
    assert await asyncio.wait_for(channel.read(), 5) == b""
    await channel.aclose()


async def test_without_a_writer_thread_a_terminal_is_written_at_once(
    terminal: tuple[int, int], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client, server = terminal
    start = threading.Thread.start

    def refuse_the_writer(thread: threading.Thread) -> None:
        if thread.name == "stdout-writer":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_the_writer)
    channel = channels._ThreadChannel(os.dup(server), os.dup(server))
    assert channel._writer is None
    assert "could not start the terminal's writer thread" in caplog.text
    channel.write_nowait(memoryview(b"written at once\n"))
    assert channel.buffered == 0
    assert drain(client) == b"written at once\n"
    os.close(client)
    with pytest.raises(channels.ChannelClosed):
        channel.write_nowait(memoryview(b"gone\n"))
    await channel.aclose()
