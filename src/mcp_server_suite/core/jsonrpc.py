"""The strict JSON-RPC 2.0 guard: one frame of bytes in, one typed message out.

Rules:

1. Fed any bytes, `parse_message` returns a `Request`, `Notification` or `Response`, or
   raises `ProtocolError`. Any other exception is a bug, and a property test says so.
2. The text must be strict I-JSON (RFC 7493): valid UTF-8, no `NaN`/`Infinity` literals, no
   number that overflows a double, no duplicate member names (compared after unescaping),
   no lone surrogates, and no nesting deeper than `MAX_JSON_DEPTH`. A violation is a parse
   error (`-32700`) answered with a null id, because the id cannot be trusted.
3. The envelope is closed: a request has exactly `jsonrpc`, `id`, `method` and optionally
   `params`; anything else is an invalid request (`-32600`). The error echoes the id when
   the id itself was valid, and null otherwise.
4. Ids are strings or integers in the I-JSON safe range. `true` is not an integer here,
   although Python thinks it is, and `1.0` is not an integer either.
5. Batches (top-level arrays) are refused: MCP removed them in 2025-06-18, and refusing
   them everywhere keeps one request per frame.
6. `encode` writes compact, ASCII-only JSON, so a frame can never contain a raw newline or
   a byte sequence that is not UTF-8.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeAlias

from mcp_server_suite.schemas.errors import ParseError, ProtocolError, RequestId

__all__ = [
    "MAX_JSON_DEPTH",
    "JSONValue",
    "Message",
    "Notification",
    "Request",
    "Response",
    "encode",
    "parse_message",
]

JSONValue: TypeAlias = Any

# Nesting depth of a whole message. The deepest legitimate message is a tools/call whose
# arguments are nested to the sanitizer's own ceiling (64 at most): 3 envelope levels above
# that leave this ample room, and it keeps well clear of the interpreter's recursion limit.
MAX_JSON_DEPTH: Final = 96

# I-JSON's interoperable integer range (RFC 7493, section 2.2): what a double holds exactly.
MAX_SAFE_INTEGER: Final = 2**53 - 1

# Ids are echoed in every response and held while a call is in flight; 256 characters fit a
# UUID or any structured id several times over without letting one id pin a megabyte.
MAX_ID_CHARS: Final = 256

_REQUEST_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params"})
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Request:
    """A call that expects a response."""

    id: RequestId
    method: str
    params: Mapping[str, JSONValue] | list[JSONValue] | None


@dataclass(frozen=True, slots=True)
class Notification:
    """A call that never gets a response."""

    method: str
    params: Mapping[str, JSONValue] | list[JSONValue] | None


@dataclass(frozen=True, slots=True)
class Response:
    """A response sent by the client. The server sends no requests, so it is ignored."""

    id: JSONValue


Message: TypeAlias = Request | Notification | Response


def parse_message(frame: bytes) -> Message:
    """Parse one frame into a typed message.

    Args:
        frame: The bytes of one line, without its terminator.

    Returns:
        The message.

    Raises:
        ParseError: The bytes are not one strict JSON value.
        ProtocolError: The value is not a valid JSON-RPC 2.0 message.
    """
    document = _parse_strict_json(frame)
    if isinstance(document, list):
        raise ProtocolError("Batch requests are not supported")
    if not isinstance(document, dict):
        raise ProtocolError("A message must be a JSON object")
    return _envelope(document)


def encode(message: Mapping[str, JSONValue]) -> bytes:
    """Encode one outgoing message as a frame, newline included.

    Args:
        message: A JSON-RPC response; plain JSON data.

    Returns:
        Compact ASCII JSON followed by `\\n`.

    Raises:
        ValueError: The message holds a non-finite float (a bug in its producer).
    """
    return _ENCODER.encode(message).encode("ascii") + b"\n"


def _parse_strict_json(frame: bytes) -> JSONValue:
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("Parse error: the message is not valid UTF-8") from None
    try:
        document = _DECODER.decode(text)
    except ProtocolError:
        raise
    except RecursionError:
        raise ParseError("Parse error: the message is nested too deeply") from None
    except ValueError:
        # JSONDecodeError, and the interpreter's limit on digits in an integer literal.
        raise ParseError("Parse error: the message is not valid JSON") from None
    # Walking the document is needed only when it could break a rule: cheap counts of the
    # raw text rule out deep nesting and escaped surrogates for almost every message.
    may_be_deep = text.count("{") + text.count("[") > MAX_JSON_DEPTH
    may_hold_surrogate = _SURROGATE_ESCAPE.search(text) is not None
    if may_be_deep or may_hold_surrogate:
        _check_depth_and_text(document)
    return document


def _object_without_duplicates(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise ParseError("Parse error: duplicate member name in an object")
    return document


def _refuse_constant(name: str) -> NoReturn:
    raise ParseError(f"Parse error: {name} is not a JSON value")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise ParseError("Parse error: a number is too large for a double")
    return value


def _check_depth_and_text(document: JSONValue) -> None:
    stack: list[tuple[JSONValue, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise ParseError("Parse error: the message holds a lone surrogate")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise ParseError("Parse error: the message is nested too deeply")
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            if isinstance(key, str):
                stack.append((key, depth))
            stack.append((child, depth + 1))


# One decoder and one encoder for the whole process: json.loads and json.dumps build a new
# one on every call when given options, and every message passes through both.
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
)
_ENCODER: Final = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _valid_id(value: JSONValue) -> RequestId | None:
    # `type(...) is int` on purpose: bool is a subclass of int, and true is not an id.
    if type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        return value
    return None


def _envelope(document: dict[str, JSONValue]) -> Message:
    if "method" not in document and ("result" in document or "error" in document):
        return Response(document.get("id"))
    has_id = "id" in document
    request_id = _valid_id(document["id"]) if has_id else None
    if has_id and request_id is None:
        raise ProtocolError("Invalid request: id must be a string or a safe integer")
    if document.get("jsonrpc") != "2.0":
        raise ProtocolError('Invalid request: jsonrpc must be "2.0"', request_id=request_id)
    if "method" not in document:
        raise ProtocolError("Invalid request: the method member is missing", request_id=request_id)
    unknown = document.keys() - _REQUEST_MEMBERS
    if unknown:
        raise ProtocolError("Invalid request: unknown envelope member", request_id=request_id)
    method = document["method"]
    if not isinstance(method, str):
        raise ProtocolError("Invalid request: method must be a string", request_id=request_id)
    params = document.get("params")
    if "params" in document and not isinstance(params, dict | list):
        raise ProtocolError(
            "Invalid request: params must be an object or an array", request_id=request_id
        )
    if request_id is None:
        return Notification(method, params)
    return Request(request_id, method, params)
