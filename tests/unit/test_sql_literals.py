"""Numeric literals that servers older than PostgreSQL 16 read otherwise (policy.py, Rule 6).

PostgreSQL 16 reads `0x1F`, `0o17`, `0b101` and `1_000` as numbers; 13 and 14 read them as a
number and a column alias, and 15 refuses them. The policy's grammar is 18's, so a checked
statement records such a literal and the session refuses it on an older server. The classes
are generated (every radix, digit groups in integers, fractions and exponents, in every place
a number may stand), and so are their look-alikes in strings, comments and identifiers, which
must never be taken for one.
"""

import asyncio
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.policy import (
    NUMERIC_LITERALS_SINCE,
    CheckedTree,
    FunctionPolicy,
    check_untrusted_tree,
    ensure_read_alike,
    parse_untrusted_sql,
)
from mcp_server_suite.tools.sql.statement import RelationCatalog, render_statement
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import PostgresServer, reader_settings


def check(text: str) -> CheckedTree:
    return check_untrusted_tree(parse_untrusted_sql(text), FunctionPolicy(), schemas=("public",))


def _digits(alphabet: str) -> st.SearchStrategy[str]:
    # Digits, optionally grouped by single underscores, as PostgreSQL 16 allows.
    groups = st.lists(st.text(alphabet, min_size=1, max_size=4), min_size=1, max_size=3)
    return groups.map("_".join)


radix_literals = st.one_of(
    st.tuples(st.sampled_from(["0x", "0X"]), _digits("0123456789abcdefABCDEF")),
    st.tuples(st.sampled_from(["0o", "0O"]), _digits("01234567")),
    st.tuples(st.sampled_from(["0b", "0B"]), _digits("01")),
).map("".join)
grouped_decimals = st.one_of(
    # An integer with at least one underscore.
    st.tuples(_digits("0123456789"), _digits("0123456789")).map("_".join),
    # A fraction or an exponent whose digits are grouped.
    st.tuples(_digits("123456789"), _digits("0123456789"))
    .map(".".join)
    .filter(lambda text: "_" in text),
    st.tuples(st.sampled_from(["1", "1.5", ".5"]), _digits("0123456789"))
    .map(lambda parts: f"{parts[0]}e{parts[1]}")
    .filter(lambda text: "_" in text),
)
newer_literals = st.one_of(radix_literals, grouped_decimals)

# Where a number may stand in a query the policy accepts; {} is the literal.
PLACES = [
    "SELECT {} AS v",
    "SELECT -{}",
    "SELECT id FROM t WHERE id > {} ORDER BY id",
    "SELECT id FROM t LIMIT {}",
    "SELECT id FROM t OFFSET {} LIMIT 1",
    "SELECT coalesce(NULL, {}) FROM t",
    "VALUES (1, {})",
    "EXPLAIN SELECT id FROM t WHERE id = {}",
]
# Texts that hold the same characters without being a numeric literal.
LOOK_ALIKES = [
    "SELECT '{}' AS v",
    'SELECT 1 AS "{}"',
    "SELECT 1 -- {}\n",
    "SELECT 1 /* {} */",
    "SELECT $q${}$q$ AS v",
    "SELECT E'\\x{}' AS v",
    "SELECT 1 AS a{}",
]
OLDER = st.integers(min_value=130_000, max_value=NUMERIC_LITERALS_SINCE - 1)
NEWER = st.integers(min_value=NUMERIC_LITERALS_SINCE, max_value=189_999)


def _parses(text: str) -> bool:
    try:
        parse_untrusted_sql(text)
    except ToolFailure:
        return False
    return True


@given(literal=newer_literals, place=st.sampled_from(PLACES), older=OLDER, newer=NEWER)
def test_a_newer_literal_is_refused_on_older_servers_only(
    literal: str, place: str, older: int, newer: int
) -> None:
    text = place.format(literal)
    if not _parses(text):
        return  # PostgreSQL 18 refuses it too (an underscore it does not allow): nothing ran.
    checked = check(text)
    assert checked.newer_literal == literal
    with pytest.raises(ToolFailure) as caught:
        ensure_read_alike(checked.newer_literal, older)
    problem = caught.value.problem
    assert problem.code is MCPErrorCode.VALIDATION_ERROR
    assert repr(checked.newer_literal) in problem.detail
    assert f"PostgreSQL {older // 10_000}," in problem.detail
    assert problem.metadata["server_version"] == older
    ensure_read_alike(checked.newer_literal, newer)


@given(literal=newer_literals, place=st.sampled_from(LOOK_ALIKES), older=OLDER)
def test_look_alikes_are_never_taken_for_a_literal(literal: str, place: str, older: int) -> None:
    text = place.format(literal)
    if not _parses(text):
        return
    checked = check(text)
    assert checked.newer_literal is None
    ensure_read_alike(checked.newer_literal, older)


@given(value=st.integers(min_value=0, max_value=10**30), older=OLDER)
def test_plain_numbers_run_everywhere(value: int, older: int) -> None:
    for text in (f"SELECT {value}", f"SELECT {value}.5e3", f"SELECT 0{value}", "SELECT .5"):
        assert check(text).newer_literal is None


def test_the_first_newer_literal_is_named_and_kept_by_the_statement() -> None:
    checked = check("SELECT 1, 'é', 0x1F, 1_000 FROM t")
    assert checked.newer_literal == "0x1F"
    catalog = RelationCatalog(("public",), [("public", "t")])
    for text, found in (("SELECT 1 FROM t WHERE id = 0b1", "0b1"), ("SELECT 2", None)):
        statement = render_statement(check(text), catalog, max_rows=5, max_result_bytes=4096)
        assert statement.newer_literal == found
    explained = render_statement(
        check("EXPLAIN SELECT 1_0 FROM t"), catalog, max_rows=5, max_result_bytes=4096
    )
    assert explained.newer_literal == "1_0"


@pytest.mark.postgres
def test_the_literal_runs_only_on_a_server_that_reads_it(postgres_server: PostgresServer) -> None:
    # PostgreSQL 15 does not read the literal as a number at all: the call is refused in-band
    # there. From 16 on the server reads it as the policy does, and the call runs.
    with postgres_server.connect() as conn:
        older = conn.info.server_version < NUMERIC_LITERALS_SINCE
        if older:
            with pytest.raises(psycopg.errors.SyntaxError):
                conn.execute("SELECT 0x1F")
        else:
            assert conn.execute("SELECT 0x1F").fetchone() == (31,)

    async def body() -> tuple[ToolFailure | list[list[Any]], list[list[Any]]]:
        tool = SQLTool(reader_settings(postgres_server))
        try:
            radix: ToolFailure | list[list[Any]]
            try:
                radix = (await tool.run(ReadOnlySQLParams(query="SELECT 0x1F AS v"))).rows
            except ToolFailure as failure:
                radix = failure
            # The same value in decimal, and the literal's text in a string, run.
            rows = (await tool.run(ReadOnlySQLParams(query="SELECT 31 AS v, '0x1F' AS s"))).rows
        finally:
            await tool.aclose()
        return radix, rows

    radix, rows = asyncio.run(body())
    assert rows == [[31, "0x1F"]]
    if not older:
        assert radix == [[31]]
        return
    assert isinstance(radix, ToolFailure)
    assert radix.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert "'0x1F' needs PostgreSQL 16" in radix.problem.detail
    assert "sqlstate" not in radix.problem.metadata
