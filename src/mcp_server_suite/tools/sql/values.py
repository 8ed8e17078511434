"""How PostgreSQL values become JSON in a `read_only_sql` result.

Rules:

1. Values arrive in PostgreSQL's text format, and every connection pins the output styles
   that format depends on (`DateStyle = ISO, YMD`, `IntervalStyle = iso_8601`,
   `bytea_output = hex`, `extra_float_digits = 1`), so one value always has one JSON form.
2. Booleans and integers become JSON booleans and numbers. Finite floats become numbers;
   NaN and the infinities become the strings "NaN", "Infinity" and "-Infinity", because the
   output is strict JSON. `numeric` stays text (its precision exceeds a double), as do
   `money`, UUIDs, network addresses, ranges, geometric types, enums, composites and every type
   this module does not name: their PostgreSQL text form.
3. Dates, times and timestamps are ISO 8601 with an offset of hours and minutes
   (`2024-01-02T03:04:05.5+00:00`, which JavaScript's `Date` reads); intervals are ISO 8601
   durations (`P1DT2H`); `bytea` is `\\x` followed by hex digits. Values ISO 8601 cannot
   express (`infinity`, years BC) keep PostgreSQL's spelling.
4. Arrays of built-in types become nested JSON arrays of their elements' forms; `json` and
   `jsonb` become the JSON they hold, refused beyond `MAX_JSON_DEPTH` levels of nesting. A
   `json` value may hold an escaped UTF-16 surrogate that no pair completes (`"\\ud800"`,
   in any case of its hex digits, in a key or a value, at any depth): such a character
   cannot be written as UTF-8 or carried by strict JSON, so it becomes U+FFFD, as bytes
   that are not UTF-8 do in text.
5. A result is bounded in bytes twice. PostgreSQL bounds the row text it sends
   (`statement.py`): `bound_rows` keeps the rows within `MCP_SQL_MAX_RESULT_BYTES` and refuses
   a first row past it. Then, because each value goes out twice (as `structuredContent` and
   inside the text block, escaped once more) and ASCII-escaped, `normalise_rows` cuts the
   rows at `RESPONSE_FACTOR` times that bound of encoded response (4 MiB by default),
   measured exactly only when the worst case (24 characters of response for one character of
   text) could exceed it.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from psycopg import postgres
from psycopg.adapt import AdaptersMap, Buffer, Loader

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode

__all__ = [
    "MAX_JSON_DEPTH",
    "RESPONSE_FACTOR",
    "NormalisedRows",
    "RawJSON",
    "bound_rows",
    "first_row_too_large",
    "make_adapters",
    "normalise_rows",
]

# A response may carry this many times MCP_SQL_MAX_RESULT_BYTES of encoded rows: 4 MiB at the
# default 1 MiB, enough for the rows twice (text block and structuredContent) with room for
# escaping, far below the 256 MiB memory limit of the shipped container.
RESPONSE_FACTOR: Final = 4
# A character of row text becomes at most this many characters of response: a character
# beyond the Basic Multilingual Plane is a 12-character surrogate-pair escape
# (`\ud83d\ude00`) both in structuredContent and in the text block (which the frame's ASCII
# encoding escapes); a control character 6 and 7, a quote 2 and 4. Results whose characters
# times this fit the response bound are not measured.
_WORST_EXPANSION: Final = 24
# The response's own members besides rows and column names (counts, flags, the JSON-RPC and
# MCP envelope) are counted as this many characters.
_RESPONSE_OVERHEAD: Final = 1024

# JSON nested deeper than this is refused rather than decoded: every later stage (the result
# model, the JSON encoder, the client) recurses once per level. No real document needs 64.
MAX_JSON_DEPTH: Final = 64

# The built-in types whose psycopg loaders already give the JSON form (booleans, integers,
# strings); every other built-in gets one of the loaders below.
_NATIVE_TYPES: Final = frozenset(
    {"bool", "int2", "int4", "int8", "oid", "text", "varchar", "bpchar", "name", "char"}
)
_FLOAT_TYPES: Final = frozenset({"float4", "float8"})
_JSON_TYPES: Final = frozenset({"json", "jsonb"})
_DATETIME_TYPES: Final = frozenset({"date", "time", "timetz", "timestamp", "timestamptz"})

# An escape of a UTF-16 surrogate in a JSON text (`\ud800` to `\udfff`): only a text that
# holds one can decode to a string with a surrogate that no pair completes.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
# One surrogate, as `json.loads` leaves it when no pair completes it.
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# What a lone surrogate becomes: the replacement character, as for text that is not UTF-8.
_REPLACEMENT: Final = "\ufffd"

# A JSON string (skipped whole) or one structural bracket.
_JSON_STRUCTURE: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')

# PostgreSQL's ISO style separates date and time with a space; ISO 8601 wants a T.
_ISO_DATETIME: Final = re.compile(r"\d{4}-\d\d-\d\d \d")
# An offset of whole hours at the end of a time (`+05`), which ISO 8601 readers such as
# JavaScript's `Date` want as `+05:00`.
_HOUR_OFFSET: Final = re.compile(r"([+-]\d\d)$")


class RawJSON(str):
    """The text of a `json` or `jsonb` value, decoded only after the result's size is known."""

    __slots__ = ()


class _TextLoader(Loader):
    # Connections pin client_encoding to UTF8; a SQL_ASCII database can still hold other
    # bytes, which are replaced rather than failing the whole result.
    def load(self, data: Buffer) -> str:
        return bytes(data).decode("utf-8", errors="replace")


class _FloatLoader(Loader):
    def load(self, data: Buffer) -> float | str:
        text = bytes(data).decode("ascii")
        value = float(text)
        # PostgreSQL spells the non-finite values NaN, Infinity and -Infinity already.
        return value if math.isfinite(value) else text


class _JSONLoader(Loader):
    def load(self, data: Buffer) -> RawJSON:
        return RawJSON(bytes(data).decode("utf-8", errors="replace"))


class _DateTimeLoader(Loader):
    def load(self, data: Buffer) -> str:
        text = bytes(data).decode("ascii")
        if text.endswith(" BC"):
            return text
        if _ISO_DATETIME.match(text):
            text = f"{text[:10]}T{text[11:]}"
        return _HOUR_OFFSET.sub(r"\1:00", text) if ":" in text else text


def make_adapters() -> AdaptersMap:
    """Return the adapters every pooled connection loads values with.

    Returns:
        A copy of psycopg's global map whose loaders give the forms this module documents.
    """
    adapters = AdaptersMap(postgres.adapters)
    # Types psycopg does not know (enums, domains, composites, extension types) load with the
    # loader of the unknown OID 0.
    adapters.register_loader(0, _TextLoader)
    for info in postgres.types:
        if info.name in _NATIVE_TYPES:
            continue
        if info.name in _FLOAT_TYPES:
            loader: type[Loader] = _FloatLoader
        elif info.name in _JSON_TYPES:
            loader = _JSONLoader
        elif info.name in _DATETIME_TYPES:
            loader = _DateTimeLoader
        else:
            loader = _TextLoader
        # Only the element type is overridden: psycopg's array loaders look their element
        # loader up in this map, so arrays of these types load as lists of these forms.
        adapters.register_loader(info.oid, loader)
    return adapters


@dataclass(frozen=True, slots=True)
class NormalisedRows:
    """Rows of JSON values, and why the bound cut them, if it did.

    Attributes:
        rows: The rows kept.
        truncated_reason: `max_result_bytes` when the response bound cut rows, else None.
    """

    rows: list[list[Any]]
    truncated_reason: str | None


def bound_rows(
    rows: list[list[Any]], max_result_bytes: int, max_rows: int
) -> tuple[list[list[Any]], str | None]:
    """Keep the rows PostgreSQL sent within the byte bound, and say why rows were cut.

    Args:
        rows: Loaded rows whose last value is the running total of the rows' text bytes
            (`statement.py`); rows past the bound hold NULLs. The total is removed.
        max_result_bytes: `MCP_SQL_MAX_RESULT_BYTES`.
        max_rows: The most rows the caller receives.

    Returns:
        The rows kept, and `max_rows` or `max_result_bytes` when rows were cut, else None.

    Raises:
        ToolFailure: The first row alone is larger than the bound (`MCP_VALIDATION_ERROR`).
    """
    within = 0
    for row in rows:
        if row[-1] > max_result_bytes:
            break
        within += 1
    if rows and within == 0:
        raise first_row_too_large(int(rows[0][-1]), max_result_bytes)
    kept = [row[:-1] for row in rows[: min(within, max_rows)]]
    if len(rows) > max_rows and within >= max_rows:
        return kept, "max_rows"
    if within < len(rows):
        return kept, "max_result_bytes"
    return kept, None


def first_row_too_large(row_bytes: int, max_result_bytes: int) -> ToolFailure:
    """Return the refusal of a result whose first row alone is larger than the bound.

    Args:
        row_bytes: The first row's bytes of text.
        max_result_bytes: `MCP_SQL_MAX_RESULT_BYTES`.
    """
    return ToolFailure(
        f"A single row of the result holds {row_bytes} bytes of text, more than the "
        f"{max_result_bytes} bytes MCP_SQL_MAX_RESULT_BYTES allows: select fewer or "
        "narrower columns, or a part of the value (left(), substr()).",
        code=MCPErrorCode.VALIDATION_ERROR,
        invalid_params=("query",),
        metadata={"row_bytes": row_bytes, "max_result_bytes": max_result_bytes},
    )


def normalise_rows(
    rows: list[list[Any]], columns: list[str], max_result_bytes: int = 0
) -> NormalisedRows:
    """Turn loaded rows into rows of JSON values, in place, within the response bound.

    Args:
        rows: Rows loaded with `make_adapters()`, as lists; they are changed in place.
        columns: The column names.
        max_result_bytes: `MCP_SQL_MAX_RESULT_BYTES`; 0 leaves the response unbounded (for
            callers that bound it themselves).

    Returns:
        The rows with JSON documents decoded, cut where the response would exceed
        `RESPONSE_FACTOR * max_result_bytes`.

    Raises:
        ToolFailure: A JSON document nests deeper than `MAX_JSON_DEPTH`, or the first row alone
            would pass the response bound (`MCP_VALIDATION_ERROR`).
    """
    total = 0
    nested = False
    for row in rows:
        for value in row:
            # Plain text is the common case: it is counted inline. JSON documents and arrays
            # are measured by `_size` and decoded below; everything else is a small scalar.
            if type(value) is str:
                total += len(value)
            elif isinstance(value, str | list):
                total += _size(value)
                nested = True
            else:
                total += _SCALAR_CHARS
    if nested:
        for row in rows:
            row[:] = [_normalise(value) for value in row]
    limit = RESPONSE_FACTOR * max_result_bytes - _RESPONSE_OVERHEAD
    names = sum(len(name) for name in columns) * _WORST_EXPANSION
    if not max_result_bytes or total * _WORST_EXPANSION + names <= limit:
        return NormalisedRows(rows, None)
    # Rule 5: measured exactly, as the response will carry them.
    encoded_names = json.dumps(columns, ensure_ascii=True)
    used = 2 * len(encoded_names) + encoded_names.count("\\") + encoded_names.count('"')
    for index, row in enumerate(rows):
        encoded = json.dumps(row, ensure_ascii=True)
        used += 2 * len(encoded) + encoded.count("\\") + encoded.count('"') + 2
        if used > limit:
            if index == 0:
                raise ToolFailure(
                    f"The first row of the result would take more than the {limit} characters "
                    f"of response that MCP_SQL_MAX_RESULT_BYTES ({max_result_bytes}) allows once "
                    "escaped for JSON: select fewer or narrower columns, or a part of the value.",
                    code=MCPErrorCode.VALIDATION_ERROR,
                    invalid_params=("query",),
                    metadata={"max_result_bytes": max_result_bytes},
                )
            return NormalisedRows(rows[:index], "max_result_bytes")
    return NormalisedRows(rows, None)


# A number, a boolean or a null counts as this many characters: about its JSON length.
_SCALAR_CHARS: Final = 8


def _size(value: Any) -> int:
    # Loaded values are text (str, RawJSON), lists of loaded values, or small scalars.
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_size(item) for item in value) + 2
    return _SCALAR_CHARS


def _normalise(value: Any) -> Any:
    if isinstance(value, RawJSON):
        return _decode_json(value)
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    return value


def _finite_or_text(text: str) -> float | str:
    # JSON numbers beyond a double's range (1e400 is valid in PostgreSQL's json) stay text
    # instead of becoming an infinity that strict JSON cannot carry.
    value = float(text)
    return value if math.isfinite(value) else text


def _decode_json(text: str) -> Any:
    _ensure_json_depth(text)
    value = json.loads(text, parse_float=_finite_or_text)
    if _SURROGATE_ESCAPE.search(text):
        # Rule 4: `json.loads` joins the pairs and leaves the lone ones.
        return _without_lone_surrogates(value)
    return value


def _without_lone_surrogates(value: Any) -> Any:
    # The decoded document with every lone surrogate replaced, in keys and values; its depth
    # is bounded by `MAX_JSON_DEPTH`, checked before it was decoded.
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(_REPLACEMENT, value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {
            _LONE_SURROGATE.sub(_REPLACEMENT, key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    return value


def _ensure_json_depth(text: str) -> None:
    # A document with few brackets cannot nest deeply; the others are scanned outside their
    # strings, so a document is refused before the recursive decoder meets it.
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    depth = 0
    for match in _JSON_STRUCTURE.finditer(text):
        mark = match.group()
        if mark in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ToolFailure(
                    f"A JSON value in the result nests deeper than {MAX_JSON_DEPTH} levels.",
                    code=MCPErrorCode.VALIDATION_ERROR,
                    invalid_params=("query",),
                    metadata={"max_json_depth": MAX_JSON_DEPTH},
                )
        elif mark in "]}":
            depth -= 1
