"""The output bound: the queue's accounting and compression, and the shell's gate and writer.

`OutputQueue` is plain data and is tested directly, with generated sequences of responses;
the shell's `_Output` is tested in-process on the event loop with a fake channel whose
writability the test controls.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.core import session as _session
from mcp_server_suite.core.backpressure import (
    COMPRESS_BACKLOG_BYTES,
    MAX_PENDING_OUTPUT_BYTES,
    OutputQueue,
)
from mcp_server_suite.core.channels import ChannelClosed
from mcp_server_suite.core.jsonrpc import encode

MIB = 1024 * 1024


def nul_reply(size: int = MIB) -> bytes:
    """A `sandbox_fs_read` reply of `size` NUL bytes, encoded as the server sends it."""
    structured = {"resolved_path": "nul", "content": "\0" * size, "bytes_read": size}
    text = json.dumps(structured, separators=(",", ":"))
    result = {"content": [{"type": "text", "text": text}], "structuredContent": structured}
    return encode({"jsonrpc": "2.0", "id": 1, "result": {**result, "isError": False}})


def drain(queue: OutputQueue, piece: int) -> bytes:
    out = bytearray()
    while queue:
        chunk = queue.take(piece)
        assert len(chunk) <= piece
        out += chunk
    return bytes(out)


# --------------------------------------------------------------------------------------------
# OutputQueue
# --------------------------------------------------------------------------------------------


def test_escaping_is_what_makes_a_reply_large_and_compression_undoes_it() -> None:
    data = nul_reply()
    assert len(data) > 13 * MIB
    assert len(zlib.compress(data, 1)) < 100 * 1024


def test_responses_come_out_in_order_and_in_bounded_pieces() -> None:
    queue = OutputQueue(limit=100, backlog=1000)
    for data in (b"a" * 30, b"b" * 5, b"c" * 5, b"d" * 40):
        queue.push(data)
    assert (queue.waiting, queue.held) == (80, 80)
    assert bytes(queue.take(25)) == b"a" * 25
    # The rest of the head, and the small ones behind it, in one piece.
    assert bytes(queue.take(25)) == b"a" * 5 + b"b" * 5 + b"c" * 5
    assert bytes(queue.take(100)) == b"d" * 40
    assert not queue
    assert (queue.waiting, queue.held) == (0, 0)
    with pytest.raises(IndexError):
        queue.take(1)


def test_a_response_behind_the_backlog_waits_compressed() -> None:
    queue = OutputQueue(limit=64 * MIB, backlog=COMPRESS_BACKLOG_BYTES)
    reply = nul_reply()
    queue.push(reply)
    assert queue.held == len(reply)
    behind = queue.hold(reply)
    assert behind.held < 100 * 1024
    assert behind.waiting == len(reply)
    queue.append(behind)
    assert queue.waiting == 2 * len(reply)
    assert queue.held < len(reply) + 100 * 1024
    assert drain(queue, 256 * 1024) == reply + reply
    assert (queue.waiting, queue.held) == (0, 0)


def test_the_gate_closes_at_the_bound_of_bytes_waiting() -> None:
    queue = OutputQueue(limit=100, backlog=0)
    assert queue.may_start()
    queue.push(b"x" * 99)
    assert queue.may_start()
    queue.push(b"x")
    # Counted as encoded, whatever they hold compressed.
    assert queue.waiting == 100
    assert queue.held < 100
    assert not queue.may_start()
    queue.take(10)
    assert queue.may_start()


def test_a_reply_that_would_hold_too_much_does_not_fit_unless_nothing_is_held() -> None:
    queue = OutputQueue(limit=100, backlog=1000)
    big = queue.hold(b"y" * 500)
    assert queue.fits(big)  # nothing is held: any size goes, alone
    queue.append(big)
    assert not queue.fits(queue.hold(b"z"))
    queue.take(450)
    assert queue.held == 50
    assert queue.fits(queue.hold(b"z" * 50))
    assert not queue.fits(queue.hold(b"z" * 51))


def test_clear_drops_everything() -> None:
    queue = OutputQueue(limit=10, backlog=0)
    queue.push(b"abc" * 10)
    queue.clear()
    assert not queue
    assert (queue.waiting, queue.held) == (0, 0)


@pytest.mark.parametrize(("limit", "backlog"), [(0, 0), (-1, 0), (10, -1)])
def test_bounds_must_make_sense(limit: int, backlog: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        OutputQueue(limit=limit, backlog=backlog)


def test_the_defaults_are_the_named_bounds() -> None:
    queue = OutputQueue()
    queue.push(b"q" * (MAX_PENDING_OUTPUT_BYTES - 1))
    assert queue.may_start()
    queue.push(b"q")
    assert not queue.may_start()


payloads = st.one_of(
    st.binary(min_size=1, max_size=300),
    st.integers(1, 5000).map(lambda n: b"\\u0000" * n),
    st.binary(min_size=1, max_size=50).map(lambda b: b * 40),
)


@given(
    st.lists(payloads, min_size=1, max_size=12),
    st.integers(0, 3000),
    st.lists(st.integers(1, 700), min_size=1, max_size=8),
)
def test_any_sequence_comes_out_whole_in_order_and_the_accounting_ends_at_zero(
    responses: list[bytes], backlog: int, pieces: list[int]
) -> None:
    queue = OutputQueue(limit=10**9, backlog=backlog)
    expected = b"".join(responses)
    out = bytearray()
    step = 0
    for data in responses:
        queue.push(data)
        # Interleave some writing with the arrivals.
        if queue and step % 2:
            out += queue.take(pieces[step % len(pieces)])
        step += 1
        assert queue.held >= 0
        assert queue.waiting >= 0
    while queue:
        size = pieces[step % len(pieces)]
        piece = queue.take(size)
        assert len(piece) <= size
        out += piece
        step += 1
    assert bytes(out) == expected
    assert (queue.waiting, queue.held) == (0, 0)


# --------------------------------------------------------------------------------------------
# The shell's output side, with a fake channel
# --------------------------------------------------------------------------------------------


class FakeChannel:
    """A channel whose writability the test sets; it records what was written."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.open = True
        self._writable = asyncio.Event()
        self._writable.set()
        self.buffered = 0

    @property
    def writable(self) -> bool:
        return self.open and self._writable.is_set()

    def block(self) -> None:
        self._writable.clear()

    def unblock(self) -> None:
        self._writable.set()

    async def read(self) -> bytes:
        await asyncio.sleep(3600)
        return b""

    def write_nowait(self, data: memoryview) -> None:
        if not self.open:
            raise ChannelClosed
        self.written += data

    async def wait_writable(self) -> None:
        await self._writable.wait()
        if not self.open:
            raise ChannelClosed

    async def aclose(self) -> None:
        self.open = False


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_responses_go_at_once_when_the_channel_takes_them() -> None:
    channel = FakeChannel()
    closed: list[bool] = []
    output = _session._Output(channel, lambda: closed.append(True))
    output.send(b"one\n")
    staged = output.stage(b"two\n")
    assert staged.fits
    output.send(staged)
    assert bytes(channel.written) == b"one\ntwo\n"
    assert output.held == 0
    await output.wait_drained()
    assert closed == []


async def test_a_stalled_client_queues_then_gets_everything_in_order() -> None:
    channel = FakeChannel()
    output = _session._Output(channel, lambda: None)
    writer = asyncio.create_task(output.run())
    try:
        channel.block()
        reply = nul_reply()
        output.send(b"first\n")
        output.send(reply)
        staged = output.stage(reply)
        assert staged.fits
        output.send(staged)
        # Behind the first large reply, the second waits compressed.
        assert output.held < len(reply) + 200 * 1024
        drained = asyncio.create_task(output.wait_drained())
        await settle()
        assert not drained.done()
        channel.unblock()
        await asyncio.wait_for(drained, 10)
        assert bytes(channel.written) == b"first\n" + reply + reply
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_tools_wait_at_the_gate_while_the_bound_is_reached_first_come_first_served() -> None:
    channel = FakeChannel()
    output = _session._Output(channel, lambda: None)
    writer = asyncio.create_task(output.run())
    order: list[int] = []

    async def tool(index: int) -> None:
        await output.wait_for_room()
        order.append(index)

    try:
        channel.block()
        output.send(b"x" * MAX_PENDING_OUTPUT_BYTES)
        tools = [asyncio.create_task(tool(index)) for index in range(3)]
        await settle()
        assert order == []
        # A cancelled waiter leaves the line without losing anyone's turn.
        tools[1].cancel()
        channel.unblock()
        await asyncio.wait_for(asyncio.gather(tools[0], tools[2]), 10)
        assert order == [0, 2]
        assert tools[1].cancelled()
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_a_reply_that_does_not_fit_is_staged_as_not_fitting() -> None:
    channel = FakeChannel()
    output = _session._Output(channel, lambda: None)
    channel.block()
    # Incompressible bytes: held as they are, so the bound is reached by what they hold.
    noise = os.urandom(MAX_PENDING_OUTPUT_BYTES // 2)
    output.send(noise)
    output.send(noise)
    staged = output.stage(os.urandom(1024))
    assert not staged.fits
    assert output.held >= MAX_PENDING_OUTPUT_BYTES // 2


async def test_a_client_gone_closes_the_output_once_and_frees_the_gate() -> None:
    channel = FakeChannel()
    closed: list[bool] = []
    output = _session._Output(channel, lambda: closed.append(True))
    writer = asyncio.create_task(output.run())
    channel.block()
    output.send(b"x" * MAX_PENDING_OUTPUT_BYTES)
    waiting = asyncio.create_task(output.wait_for_room())
    await settle()
    channel.open = False
    channel.unblock()
    await asyncio.wait_for(asyncio.gather(writer, waiting), 10)
    assert closed == [True]
    assert output.held == 0
    # Nothing more is written, and nothing waits any more.
    output.send(b"late\n")
    assert output.stage(b"late\n").fits
    await output.wait_for_room()
    await output.wait_drained()


async def test_a_write_error_at_once_closes_the_output() -> None:
    channel = FakeChannel()
    closed: list[bool] = []
    output = _session._Output(channel, lambda: closed.append(True))

    def refuse(data: memoryview) -> None:
        raise ChannelClosed

    channel.write_nowait = refuse  # type: ignore[method-assign]
    output.send(b"x\n")
    output.send(b"y\n")
    assert closed == [True]


async def test_flush_ends_when_everything_is_out_or_at_the_deadline_or_on_stop() -> None:
    loop = asyncio.get_running_loop()
    channel = FakeChannel()
    output = _session._Output(channel, lambda: None)
    writer = asyncio.create_task(output.run())
    stop = asyncio.Event()
    try:
        channel.block()
        output.send(b"x" * 10)
        started = loop.time()
        await output.flush(loop.time() + 0.05, stop)
        assert loop.time() - started >= 0.05
        stop.set()
        await asyncio.wait_for(output.flush(loop.time() + 60, stop), 1)
        stop.clear()
        channel.unblock()
        await asyncio.wait_for(output.flush(loop.time() + 60, stop), 10)
        assert bytes(channel.written) == b"x" * 10
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


def test_large_blocks_go_back_to_the_system() -> None:
    # The test machine runs glibc, whose mallopt reports success with 1.
    assert _session._return_large_blocks_to_the_system()
    assert _session._return_large_blocks_to_the_system()


class _SpillingInflater:
    """An inflater whose flush hands back more than one piece (zlib may hold output back)."""

    unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        return b"a" * min(3, max_length)

    def flush(self) -> bytes:
        return b"b" * 10


def test_what_the_inflater_holds_back_comes_out_in_pieces_too() -> None:
    from mcp_server_suite.core.backpressure import _Packed

    packed = _Packed(b"z", 13, _inflater=_SpillingInflater())  # type: ignore[arg-type]
    pieces = [bytes(packed.take(4)) for _ in range(4)]
    assert pieces == [b"aaab", b"bbbb", b"bbbb", b"b"]
    assert packed.exhausted
