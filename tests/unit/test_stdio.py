"""The handshake phase of the stdio shell, in-process over pipes."""

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from mcp_server_suite.core.framing import LineFramer
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry
from mcp_server_suite.core.server import Dispatcher, SessionState
from mcp_server_suite.core.stdio import StopSignals, answer_handshake
from tests.unit.test_core import ECHO

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
).encode()


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(client writes, server reads, server writes, client reads)."""
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    yield client_out, server_in, server_out, client_in
    for fd in (client_out, server_in, server_out, client_in):
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.fixture
def stop() -> Iterator[StopSignals]:
    handlers = StopSignals()
    yield handlers
    handlers.restore()


def dispatcher() -> Dispatcher:
    return Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")


def read_lines(fd: int) -> list[dict[str, object]]:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return []
    return [json.loads(line) for line in data.splitlines()]


def test_handshake_answers_until_initialize_and_leaves_the_rest_buffered(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    os.write(
        client_out,
        b'{"jsonrpc":"2.0","id":0,"method":"server/discover"}\n'
        b'{"jsonrpc":"2.0","id":"p","method":"ping"}\n'
        + INITIALIZE
        + b'\n{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n',
    )
    session = dispatcher()
    framer = LineFramer()
    assert answer_handshake(session, framer, stop, in_fd=server_in, out_fd=server_out)
    assert session.state is SessionState.READY
    answers = read_lines(client_in)
    assert [answer["id"] for answer in answers] == [0, "p", 1]
    assert answers[0]["error"]["code"] == -32601  # type: ignore[index]
    # tools/list waits in the framer for the asyncio phase.
    assert framer.next_frame() == b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'


def test_handshake_ends_at_eof_without_initialize(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    os.write(client_out, b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    os.close(client_out)
    assert not answer_handshake(
        dispatcher(), LineFramer(), stop, in_fd=server_in, out_fd=server_out
    )
    # The unterminated last line still counts as a frame and is answered.
    assert [answer["id"] for answer in read_lines(client_in)] == [1]


def test_initialize_as_the_unterminated_last_line_completes_the_handshake(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, _ = pipes
    os.write(client_out, INITIALIZE)
    os.close(client_out)
    framer = LineFramer()
    assert answer_handshake(dispatcher(), framer, stop, in_fd=server_in, out_fd=server_out)
    assert framer.at_eof


def test_a_signal_interrupts_the_blocking_read(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    _, server_in, server_out, _ = pipes
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert not answer_handshake(
            dispatcher(), LineFramer(), stop, in_fd=server_in, out_fd=server_out
        )
    finally:
        timer.join()
    assert (stop.count, stop.last) == (1, signal.SIGTERM)


def test_a_signal_outside_a_read_is_counted_not_raised(stop: StopSignals) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    assert (stop.count, stop.last) == (1, signal.SIGINT)


def test_a_counted_signal_stops_the_handshake_before_the_next_frame(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    os.write(client_out, INITIALIZE + b"\n")
    os.kill(os.getpid(), signal.SIGTERM)
    assert not answer_handshake(
        dispatcher(), LineFramer(), stop, in_fd=server_in, out_fd=server_out
    )
    assert read_lines(client_in) == []


def test_a_client_gone_ends_the_handshake(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    os.close(client_in)
    os.write(client_out, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert not answer_handshake(
        dispatcher(), LineFramer(), stop, in_fd=server_in, out_fd=server_out
    )


def test_restore_puts_back_the_previous_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    handlers = StopSignals()
    assert signal.getsignal(signal.SIGTERM) != before
    handlers.restore()
    assert signal.getsignal(signal.SIGTERM) == before
