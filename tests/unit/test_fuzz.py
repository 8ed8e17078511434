"""Property tests of the protocol core: fed any bytes, it answers with messages or typed errors.

The core's invariant (h11's): `parse_message` returns a message or raises `ProtocolError`,
and `Dispatcher.handle_frame` never raises at all. Any other exception is a bug.
"""

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.core.framing import NEED_DATA, LineFramer
from mcp_server_suite.core.jsonrpc import MAX_SAFE_INTEGER, Request, encode, parse_message
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry
from mcp_server_suite.core.server import CancelCall, Dispatcher, Send, StartCall
from mcp_server_suite.schemas.errors import ParseError, ProtocolError
from tests.unit.test_core import ECHO

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
methods = st.sampled_from(
    [
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "notifications/cancelled",
        "notifications/initialized",
    ]
) | st.text(max_size=12)
ids = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER) | st.text(max_size=12)

envelope_members = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
        "id": ids | json_values,
        "method": methods | json_values,
        "params": st.dictionaries(st.text(max_size=8), json_values, max_size=4) | json_values,
        "result": json_values,
        "error": json_values,
        "extra": json_values,
    },
)


def only_protocol_errors(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_message(frame)


@given(st.binary(max_size=512))
def test_any_bytes_parse_or_raise_protocol_error(frame: bytes) -> None:
    only_protocol_errors(frame)


@given(envelope_members)
def test_any_envelope_parses_or_raises_protocol_error(members: dict[str, Any]) -> None:
    only_protocol_errors(json.dumps(members).encode())


@given(envelope_members, st.integers(min_value=0, max_value=200), st.binary(min_size=1, max_size=3))
def test_corrupted_envelopes_parse_or_raise_protocol_error(
    members: dict[str, Any], position: int, garbage: bytes
) -> None:
    text = json.dumps(members).encode()
    cut = position % (len(text) + 1)
    only_protocol_errors(text[:cut] + garbage + text[cut:])


@given(ids, methods, st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_requests_round_trip_through_encode(
    request_id: object, method: str, params: object
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    frame = encode(message)
    assert frame.isascii()
    assert parse_message(frame.rstrip(b"\n")) == Request(request_id, method, params)  # type: ignore[arg-type]


@st.composite
def objects_with_a_duplicate(draw: st.DrawFn) -> bytes:
    members = draw(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=5))
    key = draw(st.sampled_from(sorted(members)))
    # Re-spell the duplicate key with \u escapes, so it matches only after unescaping.
    escaped = "".join(
        f"\\u{ord(c):04x}" if ord(c) < 0x10000 and draw(st.booleans()) else json.dumps(c)[1:-1]
        for c in key
    )
    pairs = [f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members.items()]
    duplicate = f'"{escaped}":{json.dumps(draw(json_values))}'
    pairs.insert(draw(st.integers(min_value=0, max_value=len(pairs))), duplicate)
    inner = "{" + ",".join(pairs) + "}"
    depth = draw(st.integers(min_value=0, max_value=3))
    return (
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":'
        + '{"n":' * depth
        + inner
        + "}" * depth
        + "}"
    ).encode()


@given(objects_with_a_duplicate())
def test_every_duplicate_member_is_refused(frame: bytes) -> None:
    # The id can be read, so the parse error is answered with it.
    with pytest.raises(ParseError, match="duplicate") as caught:
        parse_message(frame)
    assert caught.value.request_id == 1


@given(
    st.lists(
        st.binary(max_size=200) | envelope_members.map(lambda m: json.dumps(m).encode()),
        max_size=15,
    )
)
def test_dispatcher_never_raises_and_answers_each_id_at_most_once(frames: list[bytes]) -> None:
    dispatcher = Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")
    opening = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "f", "version": "1"},
    }
    dispatcher.handle_frame(
        json.dumps(
            {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": opening}
        ).encode()
    )
    for raw in frames:
        action = dispatcher.handle_frame(raw)
        if isinstance(action, Send):
            encode(action.message)
        elif isinstance(action, StartCall):
            assert action.request_id in dispatcher.in_flight
            encode(dispatcher.call_succeeded(action.request_id, {"text": ""}, "{}").message)
            assert action.request_id not in dispatcher.in_flight
        elif isinstance(action, CancelCall):
            pytest.fail("no call is ever left in flight here")


@given(st.binary(max_size=4096), st.integers(min_value=1, max_value=300))
def test_framer_and_dispatcher_survive_any_stream(stream: bytes, chunk: int) -> None:
    framer = LineFramer(256)
    dispatcher = Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")
    for start in range(0, len(stream), chunk):
        framer.receive_data(stream[start : start + chunk])
        while (frame := framer.next_frame()) is not NEED_DATA:
            action = dispatcher.handle_frame(frame)
            if isinstance(action, Send):
                encode(action.message)
    framer.receive_eof()
    while (frame := framer.next_frame()) is not NEED_DATA:
        dispatcher.handle_frame(frame)
