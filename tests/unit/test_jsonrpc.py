"""The strict JSON-RPC guard: what parses, what is refused, and with which code and id."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.core.jsonrpc import (
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
    MAX_SAFE_INTEGER,
    MAX_SALVAGE_RUNS,
    Notification,
    Request,
    Response,
    encode,
    parse_message,
)
from mcp_server_suite.schemas.errors import ParseError, ProtocolError
from mcp_server_suite.schemas.problems import JSONRPCCode

PARSE_ERRORS = [
    pytest.param(b"\xff", id="invalid-utf8"),
    pytest.param(b'{"jsonrpc":"2.0","method":"ping","params":{"x":"\xe2\x82"}}', id="cut-utf8"),
    pytest.param(b'{"jsonrpc":"2.0","id":"\xff","method":"ping"}', id="invalid-utf8-in-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":"\\udfff","method":"ping"}', id="surrogate-in-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"id":1,"method":"ping","x":"\\ud800"}', id="two-ids"),
    pytest.param(b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', id="overflowing-id"),
    pytest.param(b'{"jsonrpc":"2.0","method":"ping"} x', id="trailing-garbage-without-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":12', id="cut-inside-the-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":"ab', id="cut-inside-a-string-id"),
    pytest.param(
        b'{"jsonrpc":"2.0","method":"ping","params":{"a":"\\ud800"},"id":[1,', id="cut-id"
    ),
    pytest.param(b"\xef\xbb\xbf{}", id="utf8-bom"),
    pytest.param(b"{'jsonrpc':'2.0'}", id="single-quotes"),
    pytest.param(b'{"jsonrpc":"2.0","id":+1,"method":"ping"}', id="leading-plus"),
    pytest.param(b'{"id":NaN}', id="nan"),
    pytest.param(b'{"id":Infinity}', id="infinity"),
    pytest.param(b'{"id":-Infinity}', id="minus-infinity"),
    pytest.param(b'{"x":1e400}', id="overflowing-double"),
    pytest.param(b'{"x":-1e400}', id="overflowing-negative-double"),
    pytest.param(b'{"x":' + b"9" * 5000 + b"}", id="integer-beyond-digit-limit"),
    pytest.param(b'{"a":1,"a":2}', id="duplicate-member"),
    pytest.param(b'{"id":1,"\\u0069d":2}', id="duplicate-after-unescaping"),
    pytest.param(b'{"p":{"x":1,"y":{"z":1,"z":2}}}', id="nested-duplicate"),
    pytest.param(b'{"x":"\\ud800"}', id="lone-high-surrogate"),
    pytest.param(b'{"x":"\\udc00"}', id="lone-low-surrogate"),
    pytest.param(b'{"x":"\\ude00\\ud83d"}', id="reversed-surrogate-pair"),
    pytest.param(b'{"\\ud800":1}', id="surrogate-in-key"),
    pytest.param(b'{"x":["\\udfff"]}', id="surrogate-in-array"),
    pytest.param(b"{}{}", id="two-objects"),
    pytest.param(b'b"}}', id="fragment"),
    pytest.param(b"\x0c{}", id="form-feed"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"a":' * 10_000 + b"1" + b"}" * 10_000, id="ten-thousand-levels"),
    pytest.param(
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), id="one-level-too-deep"
    ),
]


@pytest.mark.parametrize("frame", PARSE_ERRORS)
def test_parse_errors(frame: bytes) -> None:
    with pytest.raises(ParseError) as caught:
        parse_message(frame)
    assert caught.value.jsonrpc_code == JSONRPCCode.PARSE_ERROR
    assert caught.value.request_id is None


def test_duplicate_member_names_are_refused_even_with_equal_values() -> None:
    with pytest.raises(ParseError, match="duplicate") as caught:
        parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"ping"}')
    assert caught.value.request_id == 1


def test_duplicate_method_smuggling_is_refused() -> None:
    # Parsers that keep the first or the last member would disagree on this request.
    with pytest.raises(ParseError, match="duplicate") as caught:
        parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}')
    assert caught.value.request_id == 1
    assert caught.value.data is None


# A message that breaks a rule is a parse error answered with its id whenever the id can be
# read; when the fault lies only in params, the data names its members at fault.
READABLE_ID = [
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xff"}}',
        1,
        ("x",),
        id="invalid-utf8-in-params",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":"a","method":"ping","params":{"x":"\xe2\x82","ok":1}}',
        "a",
        ("x",),
        id="cut-utf8-in-params",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":'
        b'{"name":"t","arguments":{"q":"\\ud800"}}}',
        7,
        ("arguments",),
        id="surrogate-in-arguments",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":'
        b'{"name":"t","arguments":{"q":"\\udc00\\ud83d"},"_meta":{"a":NaN}}}',
        7,
        ("_meta", "arguments"),
        id="two-faulty-members",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":19,"method":"ping","params":{"\\udc00":1}}',
        19,
        ("params",),
        id="surrogate-key-in-params",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":1,"a":2}}',
        2,
        ("a",),
        id="duplicate-in-params",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":{"b":1,"\\u0062":2}}}',
        2,
        ("a",),
        id="escaped-duplicate-deeper",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":-Infinity}}',
        3,
        ("x",),
        id="infinity",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":[1e400]}}',
        3,
        ("x",),
        id="overflowing-double",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":1' + b"0" * 400 + b"}}",
        11,
        ("x",),
        id="integer-of-400-digits",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":' + b"9" * 5000 + b"}}",
        11,
        ("x",),
        id="integer-beyond-the-digit-limit",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":4,"method":"ping","params":{"d":'
        + b"[" * MAX_JSON_DEPTH
        + b"]" * MAX_JSON_DEPTH
        + b"}}",
        4,
        ("d",),
        id="one-level-too-deep",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","method":"ping","params":{"d":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b'},"id":"late"}',
        "late",
        ("d",),
        id="bracket-bomb-before-the-id",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\\ud800","a\\u202eb":1}}',
        5,
        ("x",),
        id="only-the-faulty-member-is-named",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":6,"method":"ping","params":{"' + b"k" * 200 + b'":"\\ud800"}}',
        6,
        ("params",),
        id="long-names-are-not-repeated",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":6,"method":"ping","params":[1,"\\ud800"]}',
        6,
        ("params",),
        id="array",
    ),
]


@pytest.mark.parametrize(("frame", "request_id", "fields"), READABLE_ID)
def test_a_fault_in_params_is_answered_with_the_id(
    frame: bytes, request_id: object, fields: tuple[str, ...]
) -> None:
    with pytest.raises(ParseError) as caught:
        parse_message(frame)
    assert caught.value.jsonrpc_code == JSONRPCCode.PARSE_ERROR
    assert caught.value.request_id == request_id
    assert caught.value.message.startswith("Parse error: ")
    assert caught.value.data is not None
    assert caught.value.data["invalid_params"] == list(fields)
    assert caught.value.data["code"] == "MCP_INVALID_PARAMS"


@pytest.mark.parametrize(
    ("frame", "request_id"),
    [
        (b'{"jsonrpc":"2.0","id":15,"method":"\\ud800ping"}', 15),
        (b'{"jsonrpc":"2.0","id":15,"method":"ping","x":"\xff"}', 15),
        (b'{"jsonrpc":"2.0","id":15,"method":"ping","\\ud800":1}', 15),
        (b'{"jsonrpc":"2.0","id":15,"method":"ping","params":{},"params":{}}', 15),
        (b'{"jsonrpc":"2.0","id":"s","method":"ping","params":{"x":NaN},"jsonrpc":"2.0"}', "s"),
        (b'{"jsonrpc":"2.0","id":15,"method":"p","\x01":1}', 15),
    ],
)
def test_a_fault_outside_params_is_answered_with_the_id_alone(
    frame: bytes, request_id: object
) -> None:
    with pytest.raises(ParseError) as caught:
        parse_message(frame)
    assert caught.value.request_id == request_id
    assert caught.value.data is None


def test_a_bracket_count_past_its_bound_gives_up_with_a_null_id() -> None:
    # Alternating brackets defeat the run count; past the bound the id is not looked for.
    bomb = b"[1," * (MAX_SALVAGE_RUNS * 2) + b"]" * (MAX_SALVAGE_RUNS * 2)
    with pytest.raises(ParseError) as caught:
        parse_message(b'{"jsonrpc":"2.0","params":{"d":' + bomb + b'},"id":1,"method":"ping"}')
    assert caught.value.request_id is None
    # The same count within the bound finds the id.
    shallow = b"[1," * 2000 + b"]" * 2000
    with pytest.raises(ParseError) as found:
        parse_message(b'{"jsonrpc":"2.0","params":{"d":' + shallow + b'},"id":1,"method":"ping"}')
    assert found.value.request_id == 1


# Integers: beyond what a double holds exactly, refused everywhere in a message.
@pytest.mark.parametrize(
    "number",
    [MAX_SAFE_INTEGER + 1, -(MAX_SAFE_INTEGER + 1), 2**63, -(2**63), 2**64, 2**1024, 10**399],
)
def test_integers_beyond_the_safe_range_are_refused_everywhere(number: int) -> None:
    for params in ({"x": number}, {"a": [1, {"b": number}]}, [number]):
        frame = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": params})
        with pytest.raises(ParseError, match="range a double holds exactly") as caught:
            parse_message(frame.encode())
        assert caught.value.request_id == 9
    # As an id it is an invalid id, answered with a null id (the id itself is unusable).
    with pytest.raises(ProtocolError) as invalid_id:
        parse_message(json.dumps({"jsonrpc": "2.0", "id": number, "method": "ping"}).encode())
    assert type(invalid_id.value) is ProtocolError
    assert invalid_id.value.request_id is None


@pytest.mark.parametrize("number", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, 10**15])
def test_integers_in_the_safe_range_are_accepted(number: int) -> None:
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": [number]}})
    message = parse_message(frame.encode())
    assert isinstance(message, Request)
    assert message.params == {"x": [number]}


def test_floats_that_a_double_holds_are_accepted() -> None:
    frame = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[1e300,-0.0,1e-400,2.5]}}'
    message = parse_message(frame)
    assert isinstance(message, Request)
    assert message.params == {"x": [1e300, -0.0, 0.0, 2.5]}


def test_digits_inside_a_string_are_not_an_integer() -> None:
    frame = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"12345678901234567890"}}'
    assert isinstance(parse_message(frame), Request)


# The classes the tables sample: any rule-breaking value, placed in any member of params,
# anywhere in the message, is answered with the id and names that member.
violations = st.sampled_from(
    [
        '"\\ud800"',
        '"a\\udfffb"',
        '"\xff"',
        "NaN",
        "-Infinity",
        "1e999",
        str(2**53),
        str(-(2**70)),
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
        '{"k":1,"k":2}',
    ]
)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
# ASCII text: the violation that needs an invalid byte is spelt "\xff" and turned into the
# raw byte afterwards, so no other member may contain that character.
ascii_text = st.text(st.characters(max_codepoint=127), max_size=5)
plain = st.one_of(st.integers(-1000, 1000), ascii_text, st.booleans(), st.none())


@given(
    st.one_of(st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER), ascii_text),
    st.dictionaries(names, plain, max_size=4),
    names,
    violations,
    st.booleans(),
)
def test_any_violation_in_any_params_member_is_answered_with_the_id(
    request_id: object, others: dict[str, Any], name: str, violation: str, id_last: bool
) -> None:
    others.pop(name, None)
    members = [f"{json.dumps(key)}:{json.dumps(value)}" for key, value in others.items()]
    members.insert(len(members) // 2, f"{json.dumps(name)}:{violation}")
    params = "{" + ",".join(members) + "}"
    id_member = f'"id":{json.dumps(request_id)}'
    head = f'{{"jsonrpc":"2.0",{"" if id_last else id_member + ","}"method":"m","params":'
    frame = (
        (head + params + ("," + id_member if id_last else "") + "}")
        .encode("utf-8", "surrogateescape")
        .replace(b"\xc3\xbf", b"\xff")
    )
    with pytest.raises(ParseError) as caught:
        parse_message(frame)
    assert caught.value.request_id == request_id
    assert caught.value.data is not None
    assert caught.value.data["invalid_params"] == [name]


@given(names.filter(lambda name: name not in {"jsonrpc", "id", "method", "params"}), violations)
def test_any_violation_outside_params_is_answered_with_the_id(name: str, violation: str) -> None:
    frame = f'{{"jsonrpc":"2.0","id":3,"method":"m","{name}":{violation}}}'.encode()
    frame = frame.replace(b"\xc3\xbf", b"\xff")
    with pytest.raises(ParseError) as caught:
        parse_message(frame)
    assert caught.value.request_id == 3
    assert caught.value.data is None


def test_valid_surrogate_pair_is_accepted() -> None:
    message = parse_message(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud83d\\ude00"}}'
    )
    assert isinstance(message, Request)
    assert message.params == {"x": "\U0001f600"}


def test_escaped_backslash_before_u_is_not_a_surrogate() -> None:
    message = parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\\\ud800"}}')
    assert isinstance(message, Request)
    assert message.params == {"x": "\\ud800"}


def test_nesting_at_the_limit_is_accepted() -> None:
    depth = MAX_JSON_DEPTH - 2
    params = b'{"a":' * depth + b"1" + b"}" * depth
    frame = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + params + b"}"
    assert isinstance(parse_message(frame), Request)


def test_many_flat_containers_are_not_deep() -> None:
    items = b",".join([b"{}"] * (MAX_JSON_DEPTH * 3))
    frame = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[' + items + b"]}}"
    assert isinstance(parse_message(frame), Request)


INVALID_REQUESTS = [
    pytest.param(b"[]", None, id="empty-batch"),
    pytest.param(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None, id="batch"),
    pytest.param(b'"ping"', None, id="top-level-string"),
    pytest.param(b"42", None, id="top-level-number"),
    pytest.param(b"null", None, id="top-level-null"),
    pytest.param(b'{"jsonrpc":"1.0","id":1,"method":"ping"}', 1, id="jsonrpc-1.0"),
    pytest.param(b'{"id":1,"method":"ping"}', 1, id="jsonrpc-missing"),
    pytest.param(b'{"jsonrpc":2.0,"id":1,"method":"ping"}', 1, id="jsonrpc-number"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","extra":1}', 1, id="extra-member"),
    pytest.param(b'{"jsonrpc":"2.0","id":"a","method":null}', "a", id="method-null"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":7}', 1, id="method-number"),
    pytest.param(b'{"jsonrpc":"2.0","id":1}', 1, id="method-missing"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}', 1, id="params-string"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}', 1, id="params-null"),
    pytest.param(b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, id="fractional-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":1.0,"method":"ping"}', None, id="float-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, id="boolean-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, id="null-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', None, id="array-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":{},"method":"ping"}', None, id="object-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}', None, id="id-2^53"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}', None, id="id-minus-2^53"
    ),
    pytest.param(b'{"jsonrpc":"2.0","method":null}', None, id="notification-method-null"),
    pytest.param(b"{}", None, id="empty-object"),
]


@pytest.mark.parametrize(("frame", "request_id"), INVALID_REQUESTS)
def test_invalid_requests(frame: bytes, request_id: object) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_message(frame)
    assert type(caught.value) is ProtocolError
    assert caught.value.jsonrpc_code == JSONRPCCode.INVALID_REQUEST
    assert caught.value.request_id == request_id


def test_overlong_string_id_is_refused() -> None:
    frame = json.dumps({"jsonrpc": "2.0", "id": "i" * (MAX_ID_CHARS + 1), "method": "ping"})
    with pytest.raises(ProtocolError) as caught:
        parse_message(frame.encode())
    assert caught.value.request_id is None


VALID = [
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', Request(1, "ping", None), id="ping"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":"","method":"ping"}',
        Request("", "ping", None),
        id="empty-string-id",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":0,"method":"ping"}', Request(0, "ping", None), id="zero-id"
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":-9007199254740991,"method":"x"}',
        Request(-9007199254740991, "x", None),
        id="min-safe-id",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":9007199254740991,"method":"x","params":{}}',
        Request(9007199254740991, "x", {}),
        id="max-safe-id",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}',
        Request(1, "x", [1]),
        id="array-params",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        Notification("notifications/initialized", None),
        id="notification",
    ),
    pytest.param(
        b'{"method":"x","jsonrpc":"2.0","params":{"a":null}}',
        Notification("x", {"a": None}),
        id="member-order-free",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":99,"error":{"code":-1,"message":"x"}}',
        Response(99),
        id="client-error",
    ),
    pytest.param(b'{"jsonrpc":"2.0","id":"r","result":{}}', Response("r"), id="client-result"),
    pytest.param(b'{"result":1}', Response(None), id="response-without-id"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\u0000"}}',
        Request(1, "ping", {"x": "\x00"}),
        id="escaped-nul-is-json",
    ),
]


@pytest.mark.parametrize(("frame", "expected"), VALID)
def test_valid_messages(frame: bytes, expected: object) -> None:
    assert parse_message(frame) == expected


def test_encode_is_compact_ascii_with_newline() -> None:
    frame = encode({"jsonrpc": "2.0", "id": 1, "result": {"text": "caf\u00e9 \u202e\n\ud800"}})
    assert frame.endswith(b"\n")
    assert frame.count(b"\n") == 1
    assert frame.isascii()
    assert b": " not in frame
    assert json.loads(frame)["result"]["text"] == "caf\u00e9 \u202e\n\ud800"


def test_encode_refuses_non_finite_numbers() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        encode({"x": float("nan")})


@given(
    st.one_of(st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER), ascii_text),
    st.data(),
)
def test_a_cut_message_is_answered_with_its_id_once_the_id_has_arrived_whole(
    request_id: object, data: st.DataObject
) -> None:
    message = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"a": [1, "b"]}}
    ).encode()
    # The id is whole once the separator after it has arrived: before that a number may be
    # a shorter number, and a string may not be closed.
    id_complete = len(json.dumps({"jsonrpc": "2.0", "id": request_id}))
    cut = data.draw(st.integers(1, len(message) - 1))
    with pytest.raises(ParseError) as caught:
        parse_message(message[:cut])
    assert caught.value.request_id == (request_id if cut >= id_complete else None)


# Issue 21: `"id":01` and `"id":0x1` were answered with `"id": 0`, a number the client never
# sent: the decoder reads the longest value that starts the token, and the rest was not
# looked at. An id is echoed only when its token was read whole.
@pytest.mark.parametrize(
    "token",
    ["01", "0x1", "00", "-01", "1.", "1e", "0b1", "1_0", '"a"b', '"a""b"', "1 2", "tru", "7]"],
)
@pytest.mark.parametrize(
    "layout",
    [
        '{"jsonrpc":"2.0","id":%s,"method":"ping"}',
        '{"jsonrpc":"2.0","method":"ping","id":%s}',
        '{"jsonrpc":"2.0","id":%s,"method":"ping","params":{"x":NaN}}',
    ],
    ids=["first", "last", "beside-a-fault"],
)
def test_an_id_not_read_whole_is_never_echoed(token: str, layout: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_message((layout % token).encode())
    assert caught.value.request_id is None


# Tokens that fill the id's place alone: no separator or bracket outside a string, which
# would end the id's member and start another.
id_tokens = st.text(alphabet='0123456789-+.eExXb_ "a\\tnrufl', max_size=8) | st.builds(
    lambda value, junk: json.dumps(value) + junk,
    st.integers(-(10**6), 10**6) | st.text(max_size=4),
    st.text(alphabet="0123456789xXeE.-+ab\"'", max_size=3),
)


@given(id_tokens, st.sampled_from(["", ',"params":{"x":NaN}', ',"params":{"x":1}']))
def test_an_id_echoed_is_exactly_the_token_the_client_sent(token: str, rest: str) -> None:
    # Whatever fills the id's place, an id is echoed only when the token is, whole, a JSON
    # value that is a valid id, and then it is that value.
    frame = ('{"jsonrpc":"2.0","id":' + token + ',"method":"ping"' + rest + "}").encode()
    try:
        message = parse_message(frame)
    except ProtocolError as refused:
        echoed = refused.request_id
    else:
        echoed = message.id if isinstance(message, Request) else None
    if echoed is None:
        return
    value = json.loads(token)
    assert type(value) is type(echoed)
    assert value == echoed
