"""JSON values that hold an escaped UTF-16 surrogate no pair completes (`values.py`, Rule 4).

PostgreSQL's `json` keeps its text as written, so `'"\\ud800"'::json` is stored and returned
as it is; decoded, it is a Python string no UTF-8 encoder (nor the result model) accepts.
Every lone surrogate, in any escaped form (either case of the hex digits, high or low,
alone, doubled, at the end of a string, in a key) and at any depth, must become U+FFFD, while
complete pairs stay the characters they encode.
"""

import asyncio
import json
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.session import FetchedRows
from mcp_server_suite.tools.sql.tool import SQLTool, result_output
from mcp_server_suite.tools.sql.values import MAX_JSON_DEPTH, RawJSON, normalise_rows
from tests.support.postgres import PostgresServer, reader_settings

REPLACEMENT: Final = "\ufffd"


def _escape(code: int, upper: bool) -> str:
    text = f"\\u{code:04x}"
    return text.upper().replace("\\U", "\\u") if upper else text


# A piece of a JSON string's text: plain characters, a lone surrogate's escape, a complete
# pair's escape, or an escaped backslash followed by `u` (which is no escape at all).
_PIECES = st.one_of(
    st.text(
        alphabet=st.characters(codec="utf-8", min_codepoint=0x20, exclude_characters='"\\'),
        max_size=3,
    ).map(lambda text: (text, text)),
    st.tuples(st.integers(0xD800, 0xDFFF), st.booleans()).map(
        lambda pair: (_escape(pair[0], pair[1]), REPLACEMENT)
    ),
    st.tuples(st.integers(0xD800, 0xDBFF), st.integers(0xDC00, 0xDFFF), st.booleans()).map(
        lambda pair: (
            _escape(pair[0], pair[2]) + _escape(pair[1], pair[2]),
            chr(0x10000 + ((pair[0] - 0xD800) << 10) + (pair[1] - 0xDC00)),
        )
    ),
    st.just(("\\\\ud800", "\\ud800")),
)


@st.composite
def _strings(draw: st.DrawFn) -> tuple[str, str]:
    # A JSON string's text and the string it must decode to.
    pieces = draw(st.lists(_PIECES, max_size=6))
    text = "".join(piece for piece, _ in pieces)
    decoded = "".join(value for _, value in pieces)
    # Two lone escapes side by side can form a complete pair: the decoder joins them.
    joined = json.loads(f'"{text}"')
    if any(0xD800 <= ord(char) <= 0xDFFF for char in joined) or joined != decoded:
        decoded = "".join(REPLACEMENT if 0xD800 <= ord(char) <= 0xDFFF else char for char in joined)
    return f'"{text}"', decoded


def _documents() -> st.SearchStrategy[tuple[str, Any]]:
    # JSON texts holding such strings as values and keys, nested, and what they decode to.
    def extend(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[Any]:
        arrays = st.lists(children, max_size=3).map(
            lambda items: (
                "[" + ",".join(text for text, _ in items) + "]",
                [value for _, value in items],
            )
        )
        objects = st.lists(st.tuples(_strings(), children), max_size=3).map(
            lambda members: (
                "{" + ",".join(f"{key[0]}:{value[0]}" for key, value in members) + "}",
                {key[1]: value[1] for key, value in members},
            )
        )
        return arrays | objects

    numbers = st.integers(-5, 5).map(lambda number: (str(number), number))
    return st.recursive(_strings() | numbers, extend, max_leaves=12)


@given(_documents())
def test_every_lone_surrogate_becomes_the_replacement_character(
    document: tuple[str, Any],
) -> None:
    text, expected = document
    rows = normalise_rows([[RawJSON(text), [RawJSON(text)]]], ["j", "a"], 1_048_576).rows
    assert rows == [[expected, [expected]]]
    # The result is strict JSON in UTF-8, as the result model writes it.
    output = result_output(FetchedRows(["j", "a"], rows, truncated=False))
    assert json.loads(output.text)["rows"] == [[expected, [expected]]]


def test_a_document_too_deep_is_refused_before_its_surrogates_are_replaced() -> None:
    text = "[" * (MAX_JSON_DEPTH + 1) + '"\\ud800"' + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(Exception, match="nests deeper"):
        normalise_rows([[RawJSON(text)]], ["j"], 1_048_576)


@pytest.mark.postgres
def test_json_values_with_lone_surrogates_reach_the_caller(
    postgres_server: PostgresServer,
) -> None:
    # Stored `json` keeps the escapes as written; `json[]` nests them in arrays, and a
    # complete pair in `jsonb` is one character.
    text = (
        "SELECT '\"\\ud800\"'::json AS lone, "
        '\'{"\\uDC00k": ["a\\uDBFF", {"b": "\\ud83d\\ude00"}]}\'::json AS nested, '
        "ARRAY['\"\\udfff\"'::json, '[\"\\\\ud800\"]'::json] AS arr, "
        "'\"\\ud83d\\ude00\"'::jsonb AS pair"
    )

    async def main() -> list[Any]:
        tool = SQLTool(reader_settings(postgres_server))
        try:
            result = await tool.run(ReadOnlySQLParams(query=text))
        finally:
            await tool.aclose()
        return list(result.rows[0])

    assert asyncio.run(main()) == [
        REPLACEMENT,
        {REPLACEMENT + "k": ["a" + REPLACEMENT, {"b": "\U0001f600"}]},
        [REPLACEMENT, ["\\ud800"]],
        "\U0001f600",
    ]
