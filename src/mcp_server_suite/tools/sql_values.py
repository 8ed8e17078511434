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
3. Dates, times and timestamps are ISO 8601 (`2024-01-02T03:04:05.5+00`); intervals are ISO
   8601 durations (`P1DT2H`); `bytea` is `\\x` followed by hex digits. Values ISO 8601 cannot
   express (`infinity`, years BC) keep PostgreSQL's spelling.
4. Arrays of built-in types become nested JSON arrays of their elements' forms; `json` and
   `jsonb` become the JSON they hold, refused beyond `MAX_JSON_DEPTH` levels of nesting.
5. A result is measured before its JSON documents are decoded and it is validated and
   encoded (each of which multiplies its size): one holding more than `MAX_RESULT_CHARS`
   characters of values is refused.
"""

import json
import math
import re
from typing import Any, Final

from psycopg import postgres
from psycopg.adapt import AdaptersMap, Buffer, Loader

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_RESULT_CHARS",
    "RawJSON",
    "make_adapters",
    "normalise_rows",
]

# 50 rows of ordinary width are a few KiB. 4 Mi characters leave room for wide JSON documents
# while keeping one response far below the 256 MiB memory limit of the shipped container, and
# far beyond what a model can read.
MAX_RESULT_CHARS: Final = 4 * 1024 * 1024

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

# A JSON string (skipped whole) or one structural bracket.
_JSON_STRUCTURE: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')

# PostgreSQL's ISO style separates date and time with a space; ISO 8601 wants a T.
_ISO_DATETIME: Final = re.compile(r"\d{4}-\d\d-\d\d \d")


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
        if _ISO_DATETIME.match(text) and not text.endswith(" BC"):
            return f"{text[:10]}T{text[11:]}"
        return text


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


def normalise_rows(rows: list[list[Any]]) -> list[list[Any]]:
    """Turn loaded rows into rows of JSON values, in place, after checking their size.

    Args:
        rows: Rows loaded with `make_adapters()`, as lists; they are changed in place.

    Returns:
        The same rows, with JSON documents decoded.

    Raises:
        ToolFailure: The rows hold more than `MAX_RESULT_CHARS` of text, or a JSON document
            nests deeper than `MAX_JSON_DEPTH` (`MCP_VALIDATION_ERROR`).
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
    if total > MAX_RESULT_CHARS:
        raise ToolFailure(
            f"The result holds {total} characters, more than the {MAX_RESULT_CHARS} allowed: "
            "select fewer or narrower columns, or fewer rows.",
            code=MCPErrorCode.VALIDATION_ERROR,
            invalid_params=("query", "max_rows"),
            metadata={"result_chars": total, "max_result_chars": MAX_RESULT_CHARS},
        )
    if nested:
        for row in rows:
            row[:] = [_normalise(value) for value in row]
    return rows


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
    return json.loads(text, parse_float=_finite_or_text)


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
