"""The inline phase of the stdio shell (`serve_inline`, `core.inline`), in-process over pipes.

After the handshake, frames that can be answered at once are answered with blocking reads,
and the phase hands the session to the event loop exactly where it stopped: at the first
call that needs the loop (unstarted), at the first write the client does not take (the
rest unwritten), or at the end while subscriptions are open.
"""

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import threading
import time
import tty
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.audit.record import Succeeded
from mcp_server_suite.audit.trail import BATCH_DELAY_S, MAX_BATCH_RECORDS, AuditTrail
from mcp_server_suite.core.framing import LineFramer
from mcp_server_suite.core.inline import INLINE_BATCH_BYTES, InlineCalls, serve_inline
from mcp_server_suite.core.registry import RegisteredTool, ToolOutput, ToolRegistry, ToolSpec
from mcp_server_suite.core.server import Dispatcher, StartCall
from mcp_server_suite.core.stdio import (
    READ_CHUNK_BYTES,
    Handover,
    StopSignals,
    served_by_transports,
)
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.errors import ToolFailure


class Params(StrictModel):
    text: str


class Result(StrictModel):
    text: str


def shortcut(arguments: Mapping[str, Any]) -> ToolOutput | None:
    """Answers at once, except for `wait` (the event loop's) and two faults."""
    text = arguments.get("text")
    if text == "wait":
        return None
    if text == "refuse":
        raise ToolFailure("refused at once")
    if text == "crash":
        raise RuntimeError("a bug")
    if text == "big":
        text = "x" * (INLINE_BATCH_BYTES // 2)
    return ToolOutput({"text": text}, json.dumps({"text": text}, separators=(",", ":")))


async def run(params: Params) -> Result:
    return Result(text=params.text)


TOOL = ToolSpec(
    name="echo",
    title="Echo",
    description="Echo text.",
    params_model=Params,
    result_model=Result,
    run=run,
    run_inline=shortcut,
)


class MemorySink:
    description = "memory"

    def __init__(self, fail: bool = False) -> None:
        self.lines: list[bytes] = []
        self.batches = 0
        self.fail = fail

    def write(self, record: bytes) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[bytes]) -> None:
        if self.fail:
            raise OSError(errno.ENOSPC, "full")
        self.batches += 1
        self.lines.extend(records)

    def close(self) -> None:
        pass


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "legacy-client", "version": "3"},
    },
}

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-client", "version": "9"},
}


def frame(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def call(request_id: object, text: str, *, modern: bool = False) -> bytes:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": text}}
    if modern:
        params["_meta"] = MODERN_META
    return frame({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


def problem(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The problem document of a call refused in-band."""
    assert answer["result"]["isError"] is True
    document: dict[str, Any] = json.loads(answer["result"]["content"][0]["text"])
    return document


def ping(request_id: object) -> bytes:
    return frame({"jsonrpc": "2.0", "id": request_id, "method": "ping"})


class Phase:
    """One session's dispatcher, framer, trail and pipes, ready for `serve_inline`."""

    def __init__(
        self, stop: StopSignals, *, sink: MemorySink | None = None, required: bool = False
    ) -> None:
        self.stop = stop
        self.dispatcher = Dispatcher(
            ToolRegistry([RegisteredTool.loaded(TOOL)]), server_version="1"
        )
        self.framer = LineFramer()
        self.sink = MemorySink() if sink is None else sink
        self.audit = AuditTrail(self.sink, required=required)
        self.limiter = ConcurrencyLimiter(2)
        self.calls = InlineCalls(self.dispatcher, Guardrails(limiter=self.limiter), self.audit)
        self.server_in, self.client_out = os.pipe()
        self.client_in, self.server_out = os.pipe()

    def close(self) -> None:
        for fd in (self.server_in, self.client_out, self.server_out, self.client_in):
            with contextlib.suppress(OSError):
                os.close(fd)

    def legacy(self) -> None:
        self.dispatcher.handle_frame(frame(INITIALIZE).rstrip(b"\n"))

    def send(self, data: bytes, *, end: bool = False) -> None:
        os.write(self.client_out, data)
        if end:
            os.close(self.client_out)

    def serve(self, first_call: StartCall | None = None) -> Handover | None:
        return serve_inline(
            self.calls,
            self.dispatcher,
            self.framer,
            self.stop,
            in_fd=self.server_in,
            out_fd=self.server_out,
            first_call=first_call,
        )

    def received(self) -> bytes:
        os.set_blocking(self.client_in, False)
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.client_in, 1 << 20):
                data += chunk
        return data

    def answers(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.received().splitlines()]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.sink.lines]


@pytest.fixture
def stop() -> Iterator[StopSignals]:
    handlers = StopSignals()
    yield handlers
    handlers.restore()


@pytest.fixture
def phase(stop: StopSignals) -> Iterator[Phase]:
    session = Phase(stop)
    yield session
    session.close()


def test_pings_lists_and_inline_calls_are_answered_in_order_in_one_write(phase: Phase) -> None:
    phase.legacy()
    listing = frame({"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
    phase.send(ping(1) + call(2, "a") + listing + call(3, "b"), end=True)
    assert phase.serve() is None
    answers = phase.answers()
    assert [answer["id"] for answer in answers] == [1, 2, "l", 3]
    assert answers[1]["result"]["structuredContent"] == {"text": "a"}
    assert answers[1]["result"]["isError"] is False
    assert phase.dispatcher.in_flight == frozenset()
    # Every call recorded, with the client of the handshake, in one batch.
    records = phase.records()
    assert [(r["request_id"], r["outcome"], r["client"]["name"]) for r in records] == [
        (2, "ok", "legacy-client"),
        (3, "ok", "legacy-client"),
    ]
    assert phase.sink.batches == 1


def test_a_call_that_needs_the_loop_is_handed_over_unstarted(phase: Phase) -> None:
    phase.legacy()
    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}\n'
    phase.send(call(1, "a") + call(2, "wait") + cancel)
    handover = phase.serve()
    assert handover is not None
    assert isinstance(handover.first_call, StartCall)
    assert handover.first_call.request_id == 2
    assert phase.dispatcher.in_flight == {2}
    # The answer before it was not written here: it leaves first, from the event loop.
    assert phase.received() == b""
    assert json.loads(handover.unsent)["id"] == 1
    # What follows the call stays buffered for the event loop, which will find it started.
    assert phase.framer.next_frame() == cancel.rstrip(b"\n")
    # The call answered here is recorded by the time the phase ends; the other is not yet.
    assert [record["request_id"] for record in phase.records()] == [1]


def test_a_first_call_handed_over_by_the_handshake_is_answered_here(phase: Phase) -> None:
    # A 2026 client's first request is a call: the handshake phase hands it over unstarted.
    action = phase.dispatcher.handle_frame(call("first", "a", modern=True).rstrip(b"\n"))
    assert isinstance(action, StartCall)
    phase.send(b"", end=True)
    assert phase.serve(action) is None
    answers = phase.answers()
    assert [answer["id"] for answer in answers] == ["first"]
    assert answers[0]["result"]["resultType"] == "complete"
    # The 2026 era: the call is recorded with the client its own request named.
    assert phase.records()[0]["client"] == {"name": "modern-client", "version": "9"}


def test_a_first_call_that_needs_the_loop_goes_straight_back(phase: Phase) -> None:
    phase.legacy()
    action = phase.dispatcher.handle_frame(call(5, "wait").rstrip(b"\n"))
    assert isinstance(action, StartCall)
    assert phase.serve(action) == Handover(action)


def test_refusals_and_crashes_are_answered_and_recorded_as_on_the_loop(
    phase: Phase, caplog: pytest.LogCaptureFixture
) -> None:
    phase.legacy()
    poisoned = frame(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "a\u202eb"}},
        }
    )
    phase.send(call(1, "refuse") + call(2, "crash") + poisoned, end=True)
    assert phase.serve() is None
    refused, crashed, sanitized = phase.answers()
    assert problem(refused)["detail"] == "refused at once"
    assert crashed["error"]["code"] == -32603
    correlation_id = crashed["error"]["data"]["metadata"]["correlation_id"]
    assert correlation_id in caplog.text
    assert "a bug" not in json.dumps(crashed)
    # The sanitizer ran before the shortcut, as in the full path.
    assert "U+202E" in problem(sanitized)["detail"]
    outcomes = [record["outcome"] for record in phase.records()]
    assert outcomes == [problem(refused)["code"], "crash", problem(sanitized)["code"]]


def test_a_reply_the_required_trail_cannot_record_is_withheld(stop: StopSignals) -> None:
    phase = Phase(stop, sink=MemorySink(fail=True), required=True)
    try:
        phase.legacy()
        phase.send(call(1, "a"), end=True)
        assert phase.serve() is None
        (answer,) = phase.answers()
        assert problem(answer)["metadata"] == {"retryable": True, "audit": "unavailable"}
        assert "structuredContent" not in answer["result"]
    finally:
        phase.close()


def test_records_wait_for_more_calls_but_never_beyond_the_batch_delay(phase: Phase) -> None:
    phase.legacy()
    phase.send(call(1, "a"))

    seen: list[int] = []

    def later() -> None:
        # Input slower than the batch delay: the first record is written before it comes.
        try:
            time.sleep(BATCH_DELAY_S * 20)
            seen.extend(record["request_id"] for record in phase.records())
        finally:
            phase.send(call(2, "b"), end=True)

    writer = threading.Thread(target=later)
    writer.start()
    try:
        assert phase.serve() is None
    finally:
        writer.join()
    assert seen == [1]
    assert [record["request_id"] for record in phase.records()] == [1, 2]
    assert phase.sink.batches == 2


def test_a_signal_right_after_a_call_ends_the_phase_with_its_answer_and_record(
    phase: Phase,
) -> None:
    phase.legacy()
    phase.send(call(1, "a"))
    # Whether it comes while the record waits for more input or during the read, the
    # answer and the record are out when the phase ends.
    timer = threading.Timer(BATCH_DELAY_S / 2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert phase.serve() is None
    finally:
        timer.join()
    assert [record["request_id"] for record in phase.records()] == [1]
    assert [answer["id"] for answer in phase.answers()] == [1]


def test_a_signal_during_the_read_ends_the_phase(
    phase: Phase, caplog: pytest.LogCaptureFixture
) -> None:
    phase.legacy()
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert phase.serve() is None
    finally:
        timer.join()
    assert (phase.stop.count, phase.stop.last) == (1, signal.SIGINT)
    assert "received SIGINT, nothing in flight" in caplog.text


def test_a_signal_already_counted_stops_the_read_before_it_blocks(phase: Phase) -> None:
    phase.legacy()
    phase.send(ping(1))
    os.kill(os.getpid(), signal.SIGTERM)
    # Counted outside any read: the phase neither reads nor blocks waiting for input.
    assert phase.serve() is None
    assert phase.received() == b""


def test_open_subscriptions_at_the_end_are_left_to_the_loop_to_close(phase: Phase) -> None:
    listen = frame(
        {
            "jsonrpc": "2.0",
            "id": "sub",
            "method": "subscriptions/listen",
            "params": {"_meta": MODERN_META, "notifications": {}},
        }
    )
    phase.send(listen, end=True)
    handover = phase.serve()
    # The acknowledgement went; the closing result needs the session's grace.
    assert handover == Handover()
    assert phase.dispatcher.subscriptions == {"sub"}
    assert phase.framer.at_eof
    assert [a["method"] for a in phase.answers()] == ["notifications/subscriptions/acknowledged"]


def test_what_the_client_does_not_take_at_once_is_handed_over_unwritten(phase: Phase) -> None:
    phase.legacy()
    # Enough answers to fill the pipe nobody reads, in one read of requests.
    requests = b"".join(call(n, "big") for n in range(8))
    phase.send(requests, end=True)
    handover = phase.serve()
    assert handover is not None
    assert handover.first_call is None
    written = phase.received()
    # Nothing lost and nothing twice: what went plus what waits is every answer, in order.
    lines = (written + handover.unsent).splitlines()
    answered = [json.loads(line)["id"] for line in lines]
    # The rest of the requests stay buffered for the event loop.
    pending = []
    while isinstance(next_frame := phase.framer.next_frame(), bytes):
        pending.append(json.loads(next_frame)["id"])
    assert answered + pending == list(range(8))
    assert written
    assert handover.unsent
    assert len(handover.unsent) <= 2 * INLINE_BATCH_BYTES


def test_answers_are_written_in_pieces_within_one_read(
    phase: Phase, monkeypatch: pytest.MonkeyPatch
) -> None:
    phase.legacy()
    writes: list[int] = []
    write = os.write

    def recording(fd: int, data: bytes) -> int:
        if fd == phase.server_out:
            writes.append(len(data))
        return write(fd, data)

    monkeypatch.setattr(os, "write", recording)
    done = threading.Event()
    received: list[bytes] = []

    def reader() -> None:
        while chunk := os.read(phase.client_in, 1 << 20):
            received.append(chunk)
        done.set()

    # Room for every answer, so that none waits for the reader.
    fcntl.fcntl(phase.server_out, fcntl.F_SETPIPE_SZ, 1 << 20)
    thread = threading.Thread(target=reader)
    thread.start()
    phase.send(b"".join(call(n, "big") for n in range(3)), end=True)
    try:
        assert phase.serve() is None
    finally:
        os.close(phase.server_out)
        thread.join()
    answers = [json.loads(line)["id"] for line in b"".join(received).splitlines()]
    assert answers == [0, 1, 2]
    # One read of requests, but one write per answer: each fills the batch on its own.
    assert len(writes) == 3
    assert all(size < 2 * INLINE_BATCH_BYTES for size in writes)


def test_a_client_gone_ends_the_phase(phase: Phase) -> None:
    phase.legacy()
    os.close(phase.client_in)
    phase.send(ping(1) + call(2, "a"))
    assert phase.serve() is None
    assert [record["request_id"] for record in phase.records()] == [2]


def test_a_call_while_a_slot_is_held_takes_the_full_path(phase: Phase) -> None:
    phase.legacy()
    phase.send(call(1, "a"), end=True)

    async def holding_a_slot() -> Handover | None:
        # A call the event loop still runs holds it.
        async with phase.limiter.slot(1.0):
            return phase.serve()

    handover = asyncio.run(holding_a_slot())
    assert handover is not None
    assert handover.first_call is not None
    assert handover.first_call.request_id == 1


def test_a_tool_without_a_shortcut_takes_the_full_path(stop: StopSignals) -> None:
    phase = Phase(stop)
    try:
        plain = RegisteredTool.loaded(
            ToolSpec(
                name="plain",
                title="Plain",
                description="No shortcut.",
                params_model=Params,
                result_model=Result,
                run=run,
            )
        )
        phase.dispatcher = Dispatcher(ToolRegistry([plain]), server_version="1")
        phase.calls = InlineCalls(phase.dispatcher, Guardrails(limiter=phase.limiter), phase.audit)
        phase.legacy()
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "plain", "arguments": {"text": "a\u202eb"}},
        }
        phase.send(frame(request))
        handover = phase.serve()
        # Not even the sanitizer ran: the full path judges the call whole.
        assert handover is not None
        assert handover.first_call is not None
        assert phase.records() == []
    finally:
        phase.close()


def test_writes_to_a_regular_file_stay_blocking(phase: Phase, tmp_path: Path) -> None:
    phase.legacy()
    with (tmp_path / "out").open("wb") as out:
        phase.server_out, pipe_out = out.fileno(), phase.server_out
        try:
            phase.send(call(1, "a"), end=True)
            assert phase.serve() is None
            assert os.get_blocking(out.fileno())
        finally:
            phase.server_out = pipe_out
    assert json.loads((tmp_path / "out").read_bytes())["id"] == 1


def test_a_pipe_output_is_made_non_blocking_as_the_loop_would(phase: Phase) -> None:
    phase.legacy()
    phase.send(ping(1), end=True)
    assert phase.serve() is None
    assert not os.get_blocking(phase.server_out)


def test_a_socket_that_carries_both_ways_is_read_though_it_is_non_blocking(
    stop: StopSignals,
) -> None:
    phase = Phase(stop)
    server, client = socket.socketpair()
    try:
        phase.legacy()
        phase.server_in = phase.server_out = server.fileno()

        def later() -> None:
            time.sleep(0.1)
            client.sendall(ping(1))
            client.shutdown(socket.SHUT_WR)

        thread = threading.Thread(target=later)
        thread.start()
        assert phase.serve() is None
        thread.join()
        assert json.loads(client.recv(1 << 16))["id"] == 1
    finally:
        server.close()
        client.close()
        phase.close()


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [(("pipe", "pipe"), True), (("file", "pipe"), False), (("pipe", "file"), False)],
)
def test_served_by_transports_is_for_pipes_and_sockets(
    tmp_path: Path, kinds: tuple[str, str], expected: bool
) -> None:
    read_end, write_end = os.pipe()
    with (tmp_path / "f").open("w+b") as regular:
        fds = [
            regular.fileno() if kind == "file" else fd
            for kind, fd in zip(kinds, (read_end, write_end), strict=True)
        ]
        try:
            assert served_by_transports(fds[0], fds[1]) is expected
        finally:
            os.close(read_end)
            os.close(write_end)


def test_held_records_say_when_they_are_due_and_wait_for_the_caller() -> None:
    sink = MemorySink()
    now = [10.0]
    trail = AuditTrail(sink, clock=lambda: now[0])
    registry = ToolRegistry([RegisteredTool.loaded(TOOL)])
    action = StartCall(1, registry["echo"], {"text": "a"})
    assert trail.written_by() is None
    assert trail.record(action, Succeeded(None, 1), 9.0, held=True)
    now[0] = 10.001
    assert trail.record(action, Succeeded(None, 1), 9.0, held=True)
    # Due a batch delay after the first, and nothing written meanwhile, without a loop.
    assert trail.written_by() == pytest.approx(10.0 + BATCH_DELAY_S)
    assert sink.lines == []
    trail.write_waiting()
    assert (len(sink.lines), sink.batches, trail.written_by()) == (2, 1, None)
    # A full batch is written at once, held or not.
    for _ in range(MAX_BATCH_RECORDS):
        trail.record(action, Succeeded(None, 1), 9.0, held=True)
    assert (len(sink.lines), trail.written_by()) == (2 + MAX_BATCH_RECORDS, None)


def test_answers_to_a_client_whose_pipe_is_full_are_handed_over_whole(phase: Phase) -> None:
    phase.legacy()
    # Earlier output the client has not read yet fills its pipe.
    os.set_blocking(phase.server_out, False)
    filler = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            filler += os.write(phase.server_out, b" " * 4096)
    phase.send(ping(1) + ping(2))
    handover = phase.serve()
    assert handover is not None
    assert handover.first_call is None
    assert [json.loads(line)["id"] for line in handover.unsent.splitlines()] == [1, 2]
    assert len(phase.received()) == filler


def test_notifications_are_read_and_never_answered(phase: Phase) -> None:
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    phase.legacy()
    phase.send(initialized + ping(1), end=True)
    assert phase.serve() is None
    assert [answer["id"] for answer in phase.answers()] == [1]


def test_a_signal_interrupts_a_blocking_write_beside_a_regular_file_input(
    phase: Phase, tmp_path: Path
) -> None:
    # Requests from a file, answers into a pipe nobody reads: the event loop would write
    # such a pipe blocking too, so the phase does, and a stop signal gets it out.
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"".join(call(n, "big") for n in range(8)))
    phase.legacy()
    with requests.open("rb") as source:
        phase.server_in, pipe_in = source.fileno(), phase.server_in
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            assert phase.serve() is None
        finally:
            timer.join()
            phase.server_in = pipe_in
    assert os.get_blocking(phase.server_out)
    assert (phase.stop.count, phase.stop.last) == (1, signal.SIGTERM)
    # Every call answered before the signal was recorded.
    assert phase.records()


def test_overdue_records_are_written_before_input_that_already_waits(stop: StopSignals) -> None:
    # A client that never pauses must not keep records waiting beyond the batch delay: here
    # the trail's clock passes the delay at every look, and the second call already waits
    # in the pipe when the first has been answered (the first fills one read exactly).
    phase = Phase(stop)
    ticks = iter(range(1_000))
    phase.audit = AuditTrail(phase.sink, clock=lambda: next(ticks) * BATCH_DELAY_S * 2)
    phase.calls = InlineCalls(phase.dispatcher, Guardrails(limiter=phase.limiter), phase.audit)
    try:
        for fd in (phase.client_out, phase.server_out):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 8 * READ_CHUNK_BYTES)
        phase.legacy()
        first = call(1, "")
        first = call(1, "a" * (READ_CHUNK_BYTES - len(first)))
        assert len(first) == READ_CHUNK_BYTES
        phase.send(first + call(2, "b"), end=True)
        assert phase.serve() is None
        assert [answer["id"] for answer in phase.answers()] == [1, 2]
        assert phase.sink.batches == 2
        assert [record["request_id"] for record in phase.records()] == [1, 2]
    finally:
        phase.close()


# --- a terminal that hangs up (issue 21, item 4) ---------------------------------------------


@pytest.mark.parametrize("when", ["reading", "writing"])
def test_a_terminal_that_hangs_up_ends_the_phase_like_the_event_loop(
    phase: Phase, when: str
) -> None:
    # On a terminal the phase reads and writes with blocking I/O; after a hang-up both give
    # EIO, which used to escape as an OSError (a traceback, exit 1). Now it is the end of
    # input or a client gone, as on the event loop: the session ends, nothing in flight.
    client, server = os.openpty()
    tty.setraw(server)
    try:
        phase.legacy()
        if when == "writing":
            phase.framer.receive_data(ping(1))
            os.close(client)
        else:
            os.write(client, ping(1))
            threading.Timer(0.2, os.close, (client,)).start()
        assert (
            serve_inline(
                phase.calls,
                phase.dispatcher,
                phase.framer,
                phase.stop,
                in_fd=server,
                out_fd=server,
            )
            is None
        )
    finally:
        os.close(server)
        with contextlib.suppress(OSError):
            os.close(client)


def test_a_write_that_fails_otherwise_than_a_broken_pipe_is_a_client_gone(
    phase: Phase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A non-blocking write that fails with anything but EAGAIN (EIO from a device, ENOTCONN
    # from a socket) ends the session as a client gone, as on the event loop.
    phase.legacy()
    phase.send(ping(1), end=True)
    real_write = os.write

    def failing(fd: int, data: bytes) -> int:
        if fd == phase.server_out:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing)
    assert phase.serve() is None
    assert phase.received() == b""
