"""The strict JSON-RPC guard: what parses, what is refused, and with which code and id."""

import json

import pytest

from mcp_server_suite.core.jsonrpc import (
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
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
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xe2\x82"}}', id="cut-utf8"
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
    with pytest.raises(ParseError, match="duplicate"):
        parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"ping"}')


def test_duplicate_method_smuggling_is_refused() -> None:
    # Parsers that keep the first or the last member would disagree on this request.
    with pytest.raises(ParseError, match="duplicate"):
        parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}')


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
