"""Statements built for a shape checked before (statement.py, Rule 5), held to the full path.

A query whose tree differs from a checked one in its constants' values alone has the same
shape, and its statement is built from its own parse without walking the tree or parsing the
result again. Generated members of each class of query (joins and aliases, subqueries, common
table expressions that hide a table, qualified and unknown relations, quoted and multi-byte
names, comments and semicolons around the statement) with generated constants (numbers,
strings holding quotes, braces, backslashes and JSON-like text, bit strings, booleans) must
get exactly the statement `render_statement` builds; anything but a constant that differs
must change the shape.
"""

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql import tool as sql_tool
from mcp_server_suite.tools.sql.policy import (
    NUMERIC_LITERALS_SINCE,
    FunctionPolicy,
    check_untrusted_tree,
    parse_tree_text,
    parse_untrusted_sql,
)
from mcp_server_suite.tools.sql.statement import (
    ExecutableStatement,
    PolicyDefect,
    RelationCatalog,
    render_same_shape,
    render_statement,
    statement_shape,
)
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import PostgresServer, reader_settings

CATALOG = RelationCatalog(
    ("public", "sales"),
    [("public", "t"), ("public", "v"), ("sales", "orders"), ("public", "T é"), ("sales", "t")],
)
BUDGET = 4096
SCHEMAS = ("public", "sales")

# Each template holds {} where a constant goes; every member of a class is the template with
# constants of the kind it asks for (n: a number, s: a string, b: a bit string, o: a boolean).
TEMPLATES = [
    "SELECT id FROM t WHERE id > {n} ORDER BY id",
    "SELECT {n}, {s}, {b}, {o} FROM t",
    "SELECT a.id, {s} AS label FROM t AS a JOIN v AS b ON b.id = a.id + {n}",
    "SELECT x FROM (SELECT id AS x FROM orders WHERE id < {n}) AS s(x) LIMIT {n}",
    "WITH t AS (SELECT {n} AS id) SELECT id FROM t, orders WHERE orders.id = {n}",
    'SELECT * FROM "T é" WHERE name = {s}',
    "/* {s} */ SELECT coalesce(name, {s}) FROM sales.t, t WHERE id IN ({n}, {n})",
    "SELECT id FROM t WHERE name LIKE {s} UNION ALL SELECT {n} FROM nowhere;",
    "SELECT 'é', id FROM t WHERE id = ANY ({s}::int[]) OR {o};  -- {s}",
    "VALUES ({n}, {s}), ({n}, {s})",
    "SELECT {s}::date + {n}, interval {s} FROM pg_class",
]

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9).map(
        lambda value: repr(abs(value))
    ),
)
strings = st.text(alphabet=st.sampled_from(list("ab{}[]\"\\,:'é😀 \n$\t")), max_size=12).map(
    lambda text: "'" + text.replace("'", "''") + "'"
)
bits = st.one_of(
    st.text("01", min_size=1, max_size=8).map(lambda text: f"B'{text}'"),
    st.text("0123456789abcdef", min_size=1, max_size=8).map(lambda text: f"X'{text}'"),
)
booleans = st.sampled_from(["true", "false"])
KINDS = {"n": numbers, "s": strings, "b": bits, "o": booleans}


@st.composite
def member(draw: st.DrawFn, template: str) -> str:
    # The template with a constant of its kind in each place.
    parts = template.split("{")
    text = parts[0]
    for part in parts[1:]:
        kind, rest = part[0], part[2:]
        text += draw(KINDS[kind]) + rest
    return text


@st.composite
def same_class(draw: st.DrawFn) -> tuple[str, str]:
    template = draw(st.sampled_from(TEMPLATES))
    return draw(member(template)), draw(member(template))


def full_path(text: str, max_rows: int = 50) -> ExecutableStatement:
    checked = check_untrusted_tree(parse_untrusted_sql(text), FunctionPolicy(), schemas=SCHEMAS)
    return render_statement(checked, CATALOG, max_rows=max_rows, max_result_bytes=BUDGET)


def parses(text: str) -> bool:
    try:
        parse_untrusted_sql(text)
    except ToolFailure:
        return False
    return True


@given(pair=same_class(), max_rows=st.integers(1, 50))
def test_a_statement_built_for_a_shape_is_the_full_paths(
    pair: tuple[str, str], max_rows: int
) -> None:
    first, second = pair
    if not (parses(first) and parses(second)):
        return  # A generated float PostgreSQL reads as two tokens, say: no shape to share.
    like = full_path(first)
    tree = parse_tree_text(second)
    if statement_shape(tree) != statement_shape(parse_tree_text(first)):
        # Constants of two kinds (a number that is an integer in one and not the other).
        return
    built = render_same_shape(second, tree, like, max_rows=max_rows, max_result_bytes=BUDGET)
    assert built == full_path(second, max_rows)


def test_the_shape_keeps_everything_but_constant_values() -> None:
    # Pairs that differ in something the policy reads, or in a constant's kind.
    for first, second in [
        ("SELECT 1 FROM t", "SELECT pg_sleep(1) FROM t"),
        ("SELECT id FROM t WHERE id = 1", "SELECT id FROM t WHERE id < 1"),
        ("SELECT 1 FROM t", "SELECT 1 FROM v"),
        ("SELECT 1 FROM t", 'SELECT 1 FROM "T"'),
        ("SELECT 1 FROM t", "SELECT 1 FROM public.t"),
        ("SELECT 1", "SELECT NULL"),
        ("SELECT 1", "SELECT 1.5"),
        ("SELECT 1", "SELECT '1'"),
        ("SELECT 1", "SELECT 1 AS a"),
        ("SELECT 'a'::text", "SELECT 'a'::xml"),
        ("SELECT 1", "SELECT 1; SELECT 2"),
        ("EXPLAIN SELECT 1", "EXPLAIN (FORMAT JSON) SELECT 1"),
    ]:
        assert statement_shape(parse_tree_text(first)) != statement_shape(parse_tree_text(second))
    # And pairs that differ in constants alone share one.
    for first, second in [
        ("SELECT 1, 'a', true, B'1'", "SELECT -7, 'x''y}{', false, X'ff'"),
        ("SELECT id FROM t -- one\n", "  SELECT id FROM t; /* two */"),
    ]:
        assert statement_shape(parse_tree_text(first)) == statement_shape(parse_tree_text(second))


def test_a_tree_without_offsets_is_a_defect() -> None:
    like = full_path("SELECT id FROM t")
    tree = parse_tree_text("SELECT id FROM t").replace(',"location":15', "")
    with pytest.raises(PolicyDefect, match="no offset"):
        render_same_shape("SELECT id FROM t", tree, like, max_rows=5, max_result_bytes=BUDGET)


@pytest.mark.postgres
def test_calls_of_a_checked_shape_skip_the_walk_and_keep_every_check(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[str] = []
    original = sql_tool.check_untrusted_sql

    def counting(text: str, **kwargs: Any) -> Any:
        checks.append(text)
        return original(text, **kwargs)

    monkeypatch.setattr(sql_tool, "check_untrusted_sql", counting)

    async def body() -> list[Any]:
        tool = SQLTool(reader_settings(postgres_server))
        seen: list[Any] = []
        try:
            for text in (
                "SELECT id, name FROM t WHERE id = 1",
                "SELECT id, name FROM t WHERE id = 2",
                "SELECT id, name FROM t WHERE id = 0x3",  # Refused before PostgreSQL 16.
                "SELECT id, name FROM t WHERE id = 'x'",  # The server's own error.
                "SELECT pg_sleep(1) FROM t WHERE id = 1",  # Another shape: refused.
                "SELECT id, name FROM t WHERE id = 3 AND",  # Does not parse.
                "EXPLAIN SELECT id FROM t WHERE id = 1",
                "EXPLAIN SELECT id FROM t WHERE id = 1",
                "EXPLAIN SELECT id FROM t WHERE id = 2",
            ):
                try:
                    seen.append((await tool.run(ReadOnlySQLParams(query=text))).rows)
                except ToolFailure as exc:
                    seen.append(exc.problem.code.value)
        finally:
            await tool.aclose()
        return seen

    seen = asyncio.run(body())
    with postgres_server.connect() as conn:
        reads_radix = conn.info.server_version >= NUMERIC_LITERALS_SINCE
    assert seen[:6] == [
        [[1, "n1"]],
        [[2, "n2"]],
        # 0x3 is a number from PostgreSQL 16 on, and refused in-band before.
        [[3, "n3"]] if reads_radix else "MCP_VALIDATION_ERROR",
        "MCP_VALIDATION_ERROR",
        "MCP_QUERY_VIOLATION",
        "MCP_VALIDATION_ERROR",
    ]
    # The plans: one row of text each.
    assert all(isinstance(rows, list) and rows for rows in seen[6:])
    # The second and third calls, of the first's shape, were not walked again; an EXPLAIN
    # never takes a shape's statement.
    assert checks == [
        "SELECT id, name FROM t WHERE id = 1",
        "SELECT id, name FROM t WHERE id = 'x'",
        "SELECT pg_sleep(1) FROM t WHERE id = 1",
        "SELECT id, name FROM t WHERE id = 3 AND",
        "EXPLAIN SELECT id FROM t WHERE id = 1",
        "EXPLAIN SELECT id FROM t WHERE id = 2",
    ]
