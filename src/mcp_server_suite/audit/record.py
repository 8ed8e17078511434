"""One audit record: what a `tools/call` asked for and how it ended, as one JSON line.

Rules:

1. Pure and sans-I/O. The caller passes the times; nothing here reads a clock, a file or the
   environment.
2. A record is built from the call (its id, the tool, the arguments, the client's own
   `clientInfo`) and its outcome, and from nothing else: no setting, and so no secret such as
   the DSN, can reach it. A crash is recorded by its correlation id, never by its text.
3. Every line is ASCII-only JSON with no raw newline. The client's text (its name and version,
   its arguments) is escaped, so a control, bidi or line-separator character can neither forge
   a second record nor hide part of one in a log viewer.
4. The arguments are identified by the SHA-256 of their RFC 8785 (JCS) canonical form, so
   anyone holding the request can recompute the digest with any JCS implementation. The one
   departure: an integer beyond 2**53 keeps its exact digits, where JCS would round it to a
   double and give two different arguments one digest.
5. A record is bounded: the client's name and version are cut by the dispatcher, and the
   arguments are copied in full only up to `MAX_RECORDED_ARGUMENTS_BYTES`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from mcp_server_suite.schemas.problems import MCPErrorCode

if TYPE_CHECKING:
    from mcp_server_suite.core.server import ClientInfo

__all__ = [
    "CANCELLED",
    "MAX_RECORDED_ARGUMENTS_BYTES",
    "Cancelled",
    "Crashed",
    "Outcome",
    "Refused",
    "Succeeded",
    "build_record",
    "canonical_json",
    "ecmascript_number",
]

# A valid call's arguments are far smaller: a query is at most 10,000 characters (40,000
# bytes of UTF-8 at worst) and a path 4,096. Larger arguments are refused by validation
# anyway, so their digest and size identify them and the copy is left out, which keeps one
# record well inside a journal datagram.
MAX_RECORDED_ARGUMENTS_BYTES: Final = 64 * 1024

# JCS writes a number in exponent form outside this decimal-exponent window (ECMAScript's
# Number::toString, section 6.1.6.1.20).
_MAX_PLAIN_EXPONENT: Final = 21
_MIN_PLAIN_EXPONENT: Final = -6

ArgumentsMode: TypeAlias = Literal["digest", "full"]


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The tool returned a result that passed its output contract.

    Attributes:
        rows: The result's `row_count`, for tools that return rows.
        returned_bytes: The size in UTF-8 of the result's JSON text.
    """

    rows: int | None
    returned_bytes: int

    @classmethod
    def of(cls, structured: Mapping[str, Any], text: str) -> Succeeded:
        """Measure a result from its JSON data and its JSON text."""
        rows = structured.get("row_count")
        # isascii is a flag check in CPython: a megabyte of ASCII text is not encoded to count.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        return cls(rows if type(rows) is int else None, size)


@dataclass(frozen=True, slots=True)
class Refused:
    """The call was refused or failed in-band with this problem code."""

    code: MCPErrorCode


@dataclass(frozen=True, slots=True)
class Crashed:
    """The tool failed unexpectedly; the traceback is on stderr under this id."""

    correlation_id: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The call was cancelled (by the client, or at shutdown) and got no response."""


CANCELLED: Final = Cancelled()

Outcome: TypeAlias = Succeeded | Refused | Crashed | Cancelled


def build_record(
    *,
    session: str,
    started_ns: int,
    duration_s: float,
    request_id: str | int,
    client: ClientInfo | None,
    tool: str,
    arguments: Mapping[str, Any],
    arguments_mode: ArgumentsMode,
    outcome: Outcome,
) -> bytes:
    """Build the JSON line of one call.

    Args:
        session: The session's random id, which tells apart calls of different sessions
            that reuse the same request ids.
        started_ns: When the call started, in nanoseconds since the Unix epoch.
        duration_s: How long it ran, from a monotonic clock.
        request_id: The call's JSON-RPC id.
        client: What the client said it was, or None.
        tool: The tool's name.
        arguments: The call's `arguments` object, as the client sent it.
        arguments_mode: `digest` records their digest and size; `full` also a copy.
        outcome: How the call ended.

    Returns:
        One line of ASCII JSON, newline included.
    """
    canonical = canonical_json(arguments)
    request = _ascii_string(request_id) if isinstance(request_id, str) else str(request_id)
    # Every value is JSON text already: what the client wrote goes through the C encoder
    # (ASCII-only, rule 3), the rest is written by the server itself. One f-string for the
    # members every record has keeps a record a few microseconds (benchmarks/bench_core.py).
    parts = [
        f'{{"audit":"tools/call","time":"{_utc_timestamp(started_ns)}",'
        f'"session":{_ascii_string(session)},"request_id":{request},"client":{_client(client)},'
        f'"tool":{_ascii_string(tool)},"arguments_sha256":"{hashlib.sha256(canonical).hexdigest()}",'
        f'"arguments_bytes":{len(canonical)}'
    ]
    if arguments_mode == "full" and len(canonical) <= MAX_RECORDED_ARGUMENTS_BYTES:
        parts.append(f',"arguments":{_ascii_json(arguments)}')
    parts.append(_outcome_members(outcome))
    parts.append(f',"duration_ms":{round(duration_s * 1000, 3)!r}')
    if isinstance(outcome, Succeeded):
        if outcome.rows is not None:
            parts.append(f',"rows":{outcome.rows}')
        parts.append(f',"bytes":{outcome.returned_bytes}')
    parts.append("}\n")
    return "".join(parts).encode("ascii")


@functools.lru_cache(maxsize=16)
def _client(client: ClientInfo | None) -> str:
    # A session's client says the same thing on every call: it is encoded once.
    if client is None:
        return "null"
    return f'{{"name":{_ascii_string(client.name)},"version":{_ascii_string(client.version)}}}'


def _outcome_members(outcome: Outcome) -> str:
    if isinstance(outcome, Succeeded):
        return ',"outcome":"ok"'
    if isinstance(outcome, Refused):
        if outcome.code is MCPErrorCode.EXECUTION_TIMEOUT:
            return ',"outcome":"timeout"'
        return f',"outcome":"{outcome.code.value}"'
    if isinstance(outcome, Crashed):
        return f',"outcome":"crash","correlation_id":{_ascii_string(outcome.correlation_id)}'
    return ',"outcome":"cancelled"'


def _utc_timestamp(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return f"{_utc_second(seconds)}.{rest // 1000:06d}Z"


@functools.lru_cache(maxsize=1)
def _utc_second(seconds: int) -> str:
    # Calls in the same second share the formatted part: strftime is a fifth of a record.
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def canonical_json(value: Any) -> bytes:
    """Serialise plain JSON data in the RFC 8785 canonical form, as UTF-8.

    Members are sorted by their names' UTF-16 code units, there is no whitespace, strings
    escape only what JSON requires, and numbers are written as ECMAScript writes doubles
    (integers beyond 2**53 excepted: see the module's rule 4).

    Args:
        value: Data made of dicts with string keys, lists, strings, integers, finite floats,
            booleans and None, as the JSON parser produces it.

    Returns:
        The canonical bytes.

    Raises:
        TypeError: The value holds something that is not JSON data.
        ValueError: The value holds a non-finite float.
    """
    parts: list[str] = []
    _append_canonical(value, parts)
    # Lone surrogates are refused by the protocol guard; surrogatepass keeps this function
    # total for any str all the same.
    return "".join(parts).encode("utf-8", "surrogatepass")


def _append_canonical(value: Any, parts: list[str]) -> None:
    # The parser bounds nesting (96 levels), so recursion stays shallow.
    if isinstance(value, str):
        parts.append(_encode_string(value))
    elif isinstance(value, dict):
        parts.append("{")
        for index, key in enumerate(_sorted_names(value)):
            item = value[key]
            parts.append(("," if index else "") + _encode_string(key) + ":")
            # Strings are most members of every tool's arguments: written here, not recursed.
            if type(item) is str:
                parts.append(_encode_string(item))
            else:
                _append_canonical(item, parts)
        parts.append("}")
    elif isinstance(value, list):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _append_canonical(item, parts)
        parts.append("]")
    else:
        parts.append(_scalar(value))


def _scalar(value: Any) -> str:
    # Identity tests first: True == 1, and bool is a subclass of int.
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ecmascript_number(value)
    raise TypeError(f"not JSON data: {type(value).__name__}")


def _sorted_names(document: dict[Any, Any]) -> list[str]:
    try:
        # ASCII names (every tool's) sort the same by code point and by UTF-16 code unit.
        ascii_only = "".join(document).isascii()
    except TypeError:
        raise TypeError("not a JSON member name: a member name is not a str") from None
    return sorted(document) if ascii_only else sorted(document, key=_utf16_order)


def _utf16_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare in the order of their code units, as JCS sorts.
    return key.encode("utf-16-be", "surrogatepass")


def ecmascript_number(value: float) -> str:
    """Write a finite double as ECMAScript's `Number::toString` does (JCS, section 3.2.2.3).

    Python's `repr` already gives the shortest digits that round-trip; only the layout
    (where the point goes, when to switch to an exponent) differs, and is redone here.

    Raises:
        ValueError: The value is NaN or infinite, which JSON cannot hold.
    """
    if not math.isfinite(value):
        raise ValueError("JSON cannot hold a non-finite number")
    if value == 0:
        return "0"  # Negative zero too, as JCS requires.
    digits, point = _shortest_digits(abs(value))
    sign = "-" if value < 0 else ""
    count = len(digits)
    if count <= point <= _MAX_PLAIN_EXPONENT:
        return sign + digits + "0" * (point - count)
    if 0 < point <= _MAX_PLAIN_EXPONENT:
        return sign + digits[:point] + "." + digits[point:]
    if _MIN_PLAIN_EXPONENT < point <= 0:
        return sign + "0." + "0" * -point + digits
    exponent = point - 1
    mantissa = digits[0] + ("." + digits[1:] if count > 1 else "")
    return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """Return (digits, point): value == 0.<digits> * 10**point, digits without zeros at
    either end."""
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


# ASCII-only output is rule 3; compact separators keep a record to one short line.
_ascii_json: Final = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":")
).encode
# The C function that encoder calls for a str, without the method call around it.
_ascii_string: Final = json.encoder.encode_basestring_ascii
# The C string encoder of JSONEncoder(ensure_ascii=False): JCS's escapes exactly (the two-letter
# forms for \b \t \n \f \r, lower-case \u00XX for other controls, nothing else escaped).
_encode_string: Final = json.encoder.encode_basestring
