"""The blocking phase of the stdio shell (before the event loop), in-process over pipes."""

import contextlib
import json
import os
import signal
import threading
import tty
from collections.abc import Iterator

import pytest

from mcp_server_suite.core.framing import LineFramer
from mcp_server_suite.core.handshake import answer_handshake
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry
from mcp_server_suite.core.server import Dispatcher, SessionState, StartCall
from mcp_server_suite.core.stdio import Handover, StopSignals, read_input, write_all
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
    # A discovery without its _meta lacks what 2026-07-28 requires, and leaves the era open.
    assert answers[0]["error"]["code"] == -32602  # type: ignore[index]
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


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern(request_id: object, method: str, **params: object) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {"_meta": MODERN_META, **params},
    }
    return json.dumps(message).encode() + b"\n"


def test_a_probe_is_answered_and_the_phase_goes_on_until_the_era_is_chosen(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    os.write(client_out, modern("d", "server/discover") + modern(1, "tools/list") + b"\n")
    session = dispatcher()
    framer = LineFramer()
    handover = answer_handshake(session, framer, stop, in_fd=server_in, out_fd=server_out)
    # Both answered before the event loop, and the phase ended once the era was pinned.
    assert handover == Handover()
    assert session.state is SessionState.STATELESS
    answers = read_lines(client_in)
    assert [answer["id"] for answer in answers] == ["d", 1]
    assert answers[0]["result"]["supportedVersions"][0] == "2026-07-28"  # type: ignore[index]


def test_a_first_call_is_handed_over_unstarted_with_what_follows_still_buffered(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}\n'
    os.write(client_out, modern(7, "tools/call", name="echo", arguments={"text": "a"}) + cancel)
    session = dispatcher()
    framer = LineFramer()
    handover = answer_handshake(session, framer, stop, in_fd=server_in, out_fd=server_out)
    assert handover is not None
    assert isinstance(handover.first_call, StartCall)
    assert handover.first_call.request_id == 7
    assert session.in_flight == {7}
    assert read_lines(client_in) == []
    # The cancellation waits for the event loop, which will find the call started.
    assert framer.next_frame() == cancel.rstrip(b"\n")


def test_a_legacy_call_before_initialize_is_refused_in_the_phase(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, client_in = pipes
    call = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}\n'
    os.write(client_out, call + INITIALIZE + b"\n")
    session = dispatcher()
    assert answer_handshake(session, LineFramer(), stop, in_fd=server_in, out_fd=server_out)
    answers = read_lines(client_in)
    assert [answer["id"] for answer in answers] == [3, 1]
    assert answers[0]["error"]["code"] == -32600  # type: ignore[index]


def test_a_signal_interrupts_a_write_blocked_on_a_client_that_does_not_read(
    pipes: tuple[int, int, int, int], stop: StopSignals
) -> None:
    client_out, server_in, server_out, _ = pipes
    # Enough pings that their answers overflow the pipe nobody reads.
    pings = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n for n in range(4000))

    def write() -> None:
        # The pipe closes under a write still blocked when the test ends.
        with contextlib.suppress(OSError):
            os.write(client_out, pings)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert (
            answer_handshake(dispatcher(), LineFramer(), stop, in_fd=server_in, out_fd=server_out)
            is None
        )
    finally:
        timer.join()
    assert (stop.count, stop.last) == (1, signal.SIGTERM)


# --- a terminal that hangs up (issue 21, item 4) ---------------------------------------------


class Terminal:
    """A pseudo-terminal in raw mode: the server reads and writes its side, the client the
    other, and hangs up by closing it."""

    def __init__(self) -> None:
        self.client, self.server = os.openpty()
        tty.setraw(self.server)

    def hang_up(self) -> None:
        os.close(self.client)

    def close(self) -> None:
        for fd in (self.client, self.server):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    made = Terminal()
    yield made
    made.close()


def test_a_hang_up_while_the_handshake_reads_is_the_end_of_input(
    terminal: Terminal, stop: StopSignals
) -> None:
    # The read gives EIO: it used to escape as an OSError (a traceback, exit 1).
    os.write(terminal.client, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n')
    threading.Timer(0.2, terminal.hang_up).start()
    assert (
        answer_handshake(
            dispatcher(), LineFramer(), stop, in_fd=terminal.server, out_fd=terminal.server
        )
        is None
    )


def test_a_hang_up_before_the_handshake_writes_is_a_client_gone(
    terminal: Terminal, stop: StopSignals
) -> None:
    framer = LineFramer()
    framer.receive_data(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    terminal.hang_up()
    with pytest.raises(ConnectionError):
        write_all(terminal.server, b"{}\n")
    assert (
        answer_handshake(dispatcher(), framer, stop, in_fd=terminal.server, out_fd=terminal.server)
        is None
    )


def test_read_input_is_empty_when_the_read_fails(terminal: Terminal) -> None:
    terminal.hang_up()
    assert read_input(terminal.server) == b""
