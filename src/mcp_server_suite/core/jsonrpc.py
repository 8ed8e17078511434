"""The strict JSON-RPC 2.0 guard: one frame of bytes in, one typed message out.

Rules:

1. Fed any bytes, `parse_message` returns a `Request`, `Notification` or `Response`, or
   raises `ProtocolError`. Any other exception is a bug, and a property test says so.
2. The text must be strict I-JSON (RFC 7493): valid UTF-8, no `NaN`/`Infinity` literals, no
   float that overflows a double, no integer beyond what a double holds exactly (the safe
   range, +-(2**53 - 1), anywhere in the message), no duplicate member names (compared after
   unescaping), no lone surrogates, and no nesting deeper than `MAX_JSON_DEPTH`.
3. A message that breaks rule 2 is a parse error (`-32700`), answered with its id whenever
   the id can be read, so the client never waits for an answer that was sent to null
   (JSON-RPC asks for null only when the id cannot be detected). The top level is read
   member by member without trusting any of them, each value checked on its own, up to the
   first value whose end cannot be found; an `id` among the members read, occurring once,
   read whole (its token ends where a separator begins: `01` and `0x1` are not ids) and
   valid by itself, is echoed. When the fault lies only in `params`, `data` is a
   problem naming the members of `params` at fault. A message that does not open as one
   JSON object of `"name": value` members is answered with a null id.
4. The envelope is closed: a request has exactly `jsonrpc`, `id`, `method` and optionally
   `params`; anything else is an invalid request (`-32600`). The error echoes the id when
   the id itself was valid, and null otherwise.
5. Ids are strings or integers in the I-JSON safe range. `true` is not an integer here,
   although Python thinks it is, and `1.0` is not an integer either.
6. Batches (top-level arrays) are refused: MCP removed them in 2025-06-18, and refusing
   them everywhere keeps one request per frame.
7. `encode` writes compact, ASCII-only JSON, so a frame can never contain a raw newline or
   a byte sequence that is not UTF-8.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeAlias

from mcp_server_suite.schemas.errors import ParseError, ProtocolError, RequestId
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem

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
# Sixteen digits in a row are the least that can spell an integer beyond the safe range. The
# first is spelled apart so that the regex engine skips to a digit before it tries a match,
# which makes the scan of a message without one about twice as fast.
_LONG_DIGITS: Final = re.compile(r"[0-9][0-9]{15}")

# Reading the members of a message that broke a rule (rule 3): JSON's whitespace, a string
# literal (its validity is checked later), and what delimits the rest.
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING_LITERAL: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET_RUN_OR_QUOTE: Final = re.compile(r'[\[{]+|[\]}]+|"')
_SCALAR_END: Final = re.compile(r"[ \t\n\r,\]}]")
# What may follow a member's value, after whitespace: anything else means the value was not
# read whole.
_AFTER_VALUE: Final = (",", "}")
_CONTAINERS: Final = frozenset({dict, list})
# A value the C scanner cannot skip (nested past its recursion limit, or malformed) is
# skipped by counting runs of brackets. Reading an id out of a broken message is a courtesy,
# so the count is bounded: 4,096 runs cover any nesting a real client sends (a bracket bomb
# is a few runs), while a frame built to defeat the count costs milliseconds, not seconds,
# and is answered with a null id.
MAX_SALVAGE_RUNS: Final = 4096
# Names of `params` members at fault are echoed in `invalid_params` only when they look like
# a member name; anything else is reported as `params`, so no caller text is repeated.
_FIELD_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")


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
        ParseError: The bytes are not one strict JSON value (with the id when it can be
            read).
        ProtocolError: The value is not a valid JSON-RPC 2.0 message.
    """
    try:
        document = _parse_strict_json(frame)
    except ParseError as exc:
        raise _answerable(frame, exc) from None
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
    document = _decode(text)
    _check_rules(text, document, depth=1, message_level=True)
    return document


def _decode(text: str) -> JSONValue:
    try:
        return _DECODER.decode(text)
    except ProtocolError:
        raise
    except RecursionError:
        raise ParseError("Parse error: the message is nested too deeply") from None
    except ValueError:
        # JSONDecodeError, and the interpreter's limit on digits in an integer literal.
        raise ParseError("Parse error: the message is not valid JSON") from None


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


def _check_rules(text: str, value: JSONValue, *, depth: int, message_level: bool) -> None:
    """Refuse what the decoder itself cannot (rule 2), looking closer only where needed.

    Cheap scans of the text rule out escaped surrogates, deep nesting and long integers for
    almost every message; the value is examined only for what its text might hold.

    Args:
        text: The JSON text `value` was decoded from.
        value: The decoded value.
        depth: The nesting level `value` sits at in its message (the message is level 1).
        message_level: `value` is the whole message, whose integer `id` is judged by the
            envelope (an out-of-range id is an invalid id, not an unreadable message).

    Raises:
        ParseError: A lone surrogate, nesting deeper than `MAX_JSON_DEPTH`, or an integer
            beyond the safe range.
    """
    # ASCII text holds no surrogate itself (`isascii` is a flag check), only escapes of one.
    if _SURROGATE_ESCAPE.search(text) or (not text.isascii() and _SURROGATE.search(text)):
        try:
            # Exact and at C speed: UTF-8 cannot encode a surrogate that is not half of a pair.
            _SURROGATE_PROBE.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError("Parse error: the message holds a lone surrogate") from None
    may_be_deep = text.count("{") + text.count("[") + depth - 1 > MAX_JSON_DEPTH
    if may_be_deep or _LONG_DIGITS.search(text):
        _check_structure(value, depth=depth, message_level=message_level)


def _check_structure(value: JSONValue, *, depth: int, message_level: bool) -> None:
    # Level by level, with comprehensions: a wide message (a million small containers) is
    # walked at C-loop speed rather than one Python step per node.
    if message_level and isinstance(value, dict) and type(value.get("id")) is int:
        children: list[JSONValue] = [item for key, item in value.items() if key != "id"]
    else:
        children = [value]
        depth -= 1
    while children:
        if any(type(child) is int and abs(child) > MAX_SAFE_INTEGER for child in children):
            raise ParseError("Parse error: an integer is beyond the range a double holds exactly")
        containers = [child for child in children if type(child) in _CONTAINERS]
        depth += 1
        if containers and depth > MAX_JSON_DEPTH:
            raise ParseError("Parse error: the message is nested too deeply")
        children = [
            item
            for container in containers
            for item in (container.values() if type(container) is dict else container)
        ]


def _answerable(frame: bytes, violation: ParseError) -> ParseError:
    """The error to answer a frame that broke rule 2 with: its id, if it can be read (rule 3).

    Args:
        frame: The frame.
        violation: What the strict parse refused.

    Returns:
        `violation` itself when no id can be read; otherwise the same finding with the id,
        and with a problem naming the members of `params` at fault when only `params` is.
    """
    # Bytes that are not UTF-8 become lone surrogates, which the member checks refuse, so
    # an invalid byte in one member does not hide the others.
    text = frame.decode("utf-8", "surrogateescape")
    members = _members(text, 0, len(text), depth=2)
    if members is None:
        return violation
    faults = {member.key for member in members if member.fault}
    ids = [member for member in members if member.key == "id"]
    if len(ids) != 1 or ids[0].fault:
        return violation
    request_id = _valid_id(_DECODER.decode(text[ids[0].start : ids[0].end]))
    if request_id is None or not faults:
        return violation
    params = [member for member in members if member.key == "params"]
    data = None
    # Only when params is the one member at fault, and given once (or which would count?).
    if faults == {"params"} and len(params) == 1:
        inner = _members(text, params[0].start, params[0].end or len(text), depth=3)
        fields = ("params",) if not inner else _field_names(inner)
        problem = Problem.of(MCPErrorCode.INVALID_PARAMS, violation.message, invalid_params=fields)
        data = problem.as_dict()
    return ParseError(violation.message, request_id=request_id, data=data)


@dataclass(frozen=True, slots=True)
class _Member:
    """One member of an object read by `_members`: its key (None when it is not a valid
    string), where its value is (`end` is None when it could not be found), and whether the
    member breaks rule 2 on its own (a duplicated or invalid key included)."""

    key: str | None
    start: int
    end: int | None
    fault: bool


def _members(text: str, start: int, end: int, *, depth: int) -> list[_Member] | None:
    """Read `text[start:end]`, an object, member by member without trusting any of them.

    Args:
        text: The message's text.
        start: Where the object starts.
        end: Where it ends, or where the text ends when that is not known.
        depth: The nesting level of the members' values in the message.

    Returns:
        The members read, each value decoded and checked strictly once, up to where the
        object stops making sense: a value without an end that can be found, a broken key or
        separator, or anything after the closing brace. That point is recorded as a last
        member at fault, with no key and no end. None when the text does not open an object.
    """
    members: list[_Member] = []
    seen: set[str | None] = set()
    at = _skip_whitespace(text, start)
    if not text.startswith("{", at):
        return None
    at = _skip_whitespace(text, at + 1)
    broken = _Member(None, at, None, fault=True)
    if not text.startswith("}", at):
        while True:
            literal = _STRING_LITERAL.match(text, at, end)
            if literal is None:
                return [*members, broken]
            key = _key(literal.group())
            at = _skip_whitespace(text, literal.end())
            if not text.startswith(":", at):
                return [*members, broken]
            value_start = _skip_whitespace(text, at + 1)
            value_end, fault = _read_value(text, value_start, end, depth=depth, id_=key == "id")
            if value_end is not None and not text.startswith(
                _AFTER_VALUE, _skip_whitespace(text, value_end)
            ):
                # No separator follows: what was decoded is only the beginning of the value
                # (`01` reads as 0, `0x1` as 0, `"a"b` as "a", `1 2` as 1), not the value.
                fault = True
            members.append(_Member(key, value_start, value_end, fault or key in seen))
            if key is None or value_end is None:
                return [*members, broken]
            seen.add(key)
            at = _skip_whitespace(text, value_end)
            if not text.startswith(",", at):
                break
            at = _skip_whitespace(text, at + 1)
    if not text.startswith("}", at) or _skip_whitespace(text, at + 1) != end:
        return [*members, broken]
    return members


def _skip_whitespace(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return at if match is None else match.end()


def _key(literal: str) -> str | None:
    # None stands for every invalid key: one with a control character or a lone surrogate.
    try:
        key: str = _DECODER.decode(literal)
    except ValueError:
        return None
    return None if _SURROGATE.search(key) else key


def _read_value(text: str, at: int, end: int, *, depth: int, id_: bool) -> tuple[int | None, bool]:
    """Decode the value at `at` strictly; return where it ends and whether it is at fault.

    A value the strict decoder refuses is skipped leniently to find its end (`_skip`), and
    its end is None when even that fails. A member's value is always followed by a `,` or
    the closing `}`, so one that reaches `end` has no end that can be trusted (a number cut
    short by the end of the text reads as a shorter number). `id_` leaves an integer
    top-level id to the envelope (rule 5).
    """
    try:
        value, value_end = _DECODER.raw_decode(text, at)
    except (ProtocolError, ValueError, RecursionError):
        skipped = _skip(text, at, end)
        return (skipped if skipped is not None and skipped < end else None), True
    if value_end >= end:
        return None, True
    if id_ and depth == 2 and type(value) is int:
        return value_end, False
    try:
        _check_rules(text[at:value_end], value, depth=depth, message_level=False)
    except ParseError:
        return value_end, True
    return value_end, False


def _skip(text: str, at: int, end: int) -> int | None:
    """Where the value starting at `at` ends, read as leniently as possible, or None."""
    if at >= end:
        return None
    if text[at] == '"':
        literal = _STRING_LITERAL.match(text, at, end)
        return None if literal is None else literal.end()
    if text[at] not in "{[":
        scalar_end = _SCALAR_END.search(text, at, end)
        found = end if scalar_end is None else scalar_end.start()
        return found if found > at else None
    try:
        _, found = _SKIPPER.raw_decode(text, at)
    except (ValueError, RecursionError):
        return _bracket_end(text, at, end)
    return found if found <= end else None


def _bracket_end(text: str, at: int, end: int) -> int | None:
    """Find a container's end by counting runs of brackets outside strings.

    The count is loose on purpose (a `]` may close a `{`): the member is at fault anyway,
    and only its end is wanted.
    """
    depth = 0
    position = at
    for _ in range(MAX_SALVAGE_RUNS):
        token = _BRACKET_RUN_OR_QUOTE.search(text, position, end)
        if token is None:
            return None
        run = token.group()
        if run == '"':
            literal = _STRING_LITERAL.match(text, token.start(), end)
            if literal is None:
                return None
            position = literal.end()
            continue
        if run[0] in "{[":
            depth += len(run)
        elif len(run) >= depth:
            return token.start() + depth
        else:
            depth -= len(run)
        position = token.end()
    return None


def _field_names(members: list[_Member]) -> tuple[str, ...]:
    names = {
        member.key if member.key is not None and _FIELD_NAME.fullmatch(member.key) else "params"
        for member in members
        if member.fault
    }
    return tuple(sorted(names)) or ("params",)


# One decoder and one encoder for the whole process: json.loads and json.dumps build a new
# one on every call when given options, and every message passes through both.
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
)
# Outgoing messages are trees the server builds from JSON data, which cannot hold a cycle, so
# the encoder does not keep the record of containers that would find one.
_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=False
)
# Only for finding lone surrogates: serialised without escapes, a lone surrogate cannot be
# encoded as UTF-8.
_SURROGATE_PROBE: Final = json.JSONEncoder(ensure_ascii=False, check_circular=False)
# Only for finding where a value ends (rule 3): every literal is accepted and integers are
# read as floats, so no hook raises and no literal is too long to read.
_SKIPPER: Final = json.JSONDecoder(parse_int=float, strict=False)


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
