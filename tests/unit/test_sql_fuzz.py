"""Hypothesis: a grammar of harmless SELECTs, and attack mutations of them.

The corpus is a sample; these properties stand for the classes it samples.

1. Every SELECT of the grammar passes the policy, carries the cap, and regenerates to a fixed
   point (checking the executed SQL again yields the same SQL).
2. Against the server, the executed SQL returns what the caller's text returns.
3. Every attack mutation of a grammar SELECT (a stacked statement, a denied function in any
   position and any spelling, a write in a CTE, a row lock, SELECT INTO, a bind parameter, a
   foreign space, an ambiguous literal) is refused by the policy.
4. Any text at all either passes or is refused with a problem: the policy never crashes.
"""

# ruff: noqa: S608
# (The tests build SQL text on purpose: hostile queries are what they feed the policy.)

import asyncio
from typing import Final

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.tools.sql import CheckedQuery, check_untrusted_sql
from mcp_server_suite.tools.sql_policy import FunctionPolicy
from mcp_server_suite.tools.sql_session import FetchedRows, fetch_read_only
from mcp_server_suite.tools.sql_values import make_adapters
from tests.support.postgres import PostgresServer

POLICY: Final = FunctionPolicy()

# --- The grammar ---------------------------------------------------------------------------

INT_COLUMNS: Final = ("t.id", "t.id % 7", "length(t.name)")
TEXT_COLUMNS: Final = ("t.name", "t.secret", "upper(t.name)")

int_literal = st.integers(min_value=-1000, max_value=1000).map(str)
text_literal = st.sampled_from(
    ["'n1'", "'abc'", "''", "'it''s'", "'%'", "'a b'", "E'x\\\\y'", "$$d$$", "'\\d+'", "U&'\\0041'"]
)


def int_expressions() -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(INT_COLUMNS), int_literal)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(
                lambda p: f"({p[0]} {p[1]} {p[2]})"
            ),
            inner.map(lambda e: f"abs({e})"),
            st.tuples(inner, inner).map(lambda p: f"greatest({p[0]}, {p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"coalesce({p[0]}, {p[1]})"),
            inner.map(lambda e: f"CAST({e} AS bigint)"),
            inner.map(lambda e: f"({e})::int8"),
            st.tuples(inner, inner).map(lambda p: f"CASE WHEN {p[0]} > 0 THEN {p[1]} ELSE 0 END"),
            st.tuples(text_expressions_leaf(), inner).map(lambda p: f"length({p[0]}) + {p[1]}"),
        )

    return st.recursive(leaves, extend, max_leaves=6)


def text_expressions_leaf() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(TEXT_COLUMNS), text_literal)


def text_expressions() -> st.SearchStrategy[str]:
    leaf = text_expressions_leaf()
    return st.one_of(
        leaf,
        st.tuples(leaf, leaf).map(lambda p: f"({p[0]} || {p[1]})"),
        leaf.map(lambda e: f"lower({e})"),
        leaf.map(lambda e: f"md5({e})"),
        st.tuples(leaf, st.integers(1, 5)).map(lambda p: f"left({p[0]}, {p[1]})"),
        st.tuples(leaf, leaf).map(lambda p: f"concat_ws('-', {p[0]}, {p[1]})"),
        leaf.map(lambda e: f"replace({e}, 'n', 'm')"),
    )


def conditions() -> st.SearchStrategy[str]:
    ints, texts = int_expressions(), text_expressions_leaf()
    return st.one_of(
        st.tuples(ints, st.sampled_from(["=", "<>", "<", ">=", "<="]), ints).map(" ".join),
        st.tuples(texts, st.sampled_from(["LIKE 'n1%'", "IS NOT NULL", "~ 'n[0-9]'"])).map(
            " ".join
        ),
        ints.map(lambda e: f"{e} BETWEEN 1 AND 100"),
        ints.map(lambda e: f"{e} IN (1, 2, 3, 10)"),
        st.just("EXISTS (SELECT 1 FROM v WHERE v.id = t.id)"),
        st.just("t.id IN (SELECT id FROM v WHERE id < 20)"),
    )


@st.composite
def selects(draw: st.DrawFn) -> str:
    """A harmless SELECT over the fixture's tables, ordered so its rows are deterministic."""
    shape = draw(st.sampled_from(["rows", "aggregate", "union", "cte", "join"]))
    where = draw(st.one_of(st.just(""), conditions().map(lambda c: f" WHERE {c}")))
    limit = draw(
        st.one_of(
            st.just(""),
            st.integers(0, 120).map(lambda n: f" LIMIT {n}"),
            st.just(" LIMIT ALL"),
            st.integers(1, 60).map(lambda n: f" FETCH FIRST {n} ROWS ONLY"),
        )
    )
    offset = draw(st.one_of(st.just(""), st.integers(0, 30).map(lambda n: f" OFFSET {n}")))
    a, b = draw(int_expressions()), draw(text_expressions())
    if shape == "rows":
        return f"SELECT t.id, {a} AS a, {b} AS b FROM t{where} ORDER BY t.id{limit}{offset}"
    if shape == "aggregate":
        return (
            f"SELECT t.id % 5 AS k, count(*) AS n, max({a}) AS m, string_agg({b}, ',' "
            f"ORDER BY t.id) AS s FROM t{where} GROUP BY t.id % 5 ORDER BY k{limit}"
        )
    if shape == "union":
        return (
            f"SELECT t.id, {a} AS a FROM t{where} UNION ALL SELECT v.id, v.id FROM v "
            f"WHERE v.id < 40 ORDER BY 1, 2{limit}"
        )
    if shape == "cte":
        return (
            f"WITH c AS (SELECT t.id, {a} AS a FROM t{where}) SELECT c.id, c.a, "
            f"row_number() OVER (ORDER BY c.id) AS r FROM c ORDER BY c.id{limit}{offset}"
        )
    return (
        f"SELECT t.id, v.name, {b} AS b FROM t JOIN v ON v.id = t.id{where} "
        f"ORDER BY t.id{limit}{offset}"
    )


max_rows = st.integers(min_value=1, max_value=50)


def policy_check(text: str, rows: int) -> CheckedQuery:
    return check_untrusted_sql(text, max_rows=rows, functions=POLICY)


@given(selects(), max_rows)
def test_grammar_selects_pass_capped_and_regenerate_to_a_fixed_point(text: str, rows: int) -> None:
    first = policy_check(text, rows)
    assert first.limit <= rows + 1
    assert first.sql.endswith(f"LIMIT {first.limit}") or f"LIMIT {first.limit} OFFSET" in first.sql
    again = policy_check(first.sql, rows)
    assert again.sql == first.sql


def _superuser_fetch(server: PostgresServer, statement: str, rows: int) -> FetchedRows:
    async def body() -> FetchedRows:
        conn = await psycopg.AsyncConnection.connect(
            server.superuser_dsn, autocommit=True, context=make_adapters()
        )
        try:
            return await fetch_read_only(
                conn, statement, max_rows=rows, statement_timeout_ms=5000, client_timeout=10
            )
        finally:
            await conn.close()

    return asyncio.run(body())


@pytest.mark.postgres
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=selects(), rows=max_rows)
def test_executed_sql_returns_what_the_text_returns(
    postgres_server: PostgresServer, text: str, rows: int
) -> None:
    executed = policy_check(text, rows).sql
    # The caller's text, run as written (the cursor still fetches at most rows + 1), against
    # the SQL the policy regenerated.
    original = _superuser_fetch(postgres_server, text, rows)
    regenerated = _superuser_fetch(postgres_server, executed, rows)
    assert regenerated.columns == original.columns
    assert regenerated.rows == original.rows
    assert regenerated.truncated == original.truncated


# --- Attack mutations ---------------------------------------------------------------------

DENIED_CALLS: Final = (
    "pg_sleep(1)",
    "pg_sleep_for('1 second')",
    "pg_advisory_lock(1)",
    "pg_try_advisory_lock(1)",
    "txid_current()",
    "pg_current_xact_id()",
    "set_config('search_path', 'public', false)",
    "dblink_exec('dbname=app', 'DELETE FROM victim')",
    "lo_import('/etc/hostname')",
    "lo_from_bytea(0, 'x')",
    "pg_read_file('/etc/passwd')",
    "pg_ls_dir('.')",
    "nextval('s')",
    "setval('s', 1)",
    "pg_notify('c', 'x')",
    "pg_terminate_backend(1)",
    "pg_logical_emit_message(false, 'p', 'x')",
    "query_to_xml('select 1', true, false, '')",
    "table_to_xml('private', true, false, '')",
    "repeat('x', 1000000)",
    "lpad('', 1000000, 'x')",
    "format('%1000000s', 'x')",
    "evil()",
    "evil_definer()",
    "no_such_function(1)",
)


def _spell(call: str, spelling: str) -> str:
    name, _, rest = call.partition("(")
    if spelling == "quoted":
        name = f'"{name}"'
    elif spelling == "upper":
        name = name.upper()
    elif spelling == "quoted-upper":
        name = f'"{name.upper()}"'
    elif spelling == "pg_catalog":
        name = f"pg_catalog.{name}"
    elif spelling == "public":
        name = f"public.{name}"
    elif spelling == "unicode":
        name = 'U&"' + "".join(f"\\{ord(c):04x}" for c in name) + '"'
    return f"{name}({rest}"


@st.composite
def attacks(draw: st.DrawFn) -> str:
    base = draw(selects())
    kind = draw(
        st.sampled_from(
            ["call", "stacked", "cte-write", "lock", "into", "parameter", "space", "literal"]
        )
    )
    if kind == "stacked":
        tail = draw(
            st.sampled_from(
                ["DROP TABLE victim", "COMMIT", "SELECT pg_sleep(1)", "DELETE FROM victim", ""]
            )
        )
        separator = draw(st.sampled_from([";", " ; ", ";/**/", ";\n--x\n"]))
        return f"{base}{separator}{tail}" if tail else f"{base}; SELECT 1"
    if kind == "cte-write":
        write = draw(
            st.sampled_from(
                [
                    "DELETE FROM victim RETURNING *",
                    "INSERT INTO audit(msg) VALUES ('x') RETURNING *",
                    "UPDATE t SET name = 'x' RETURNING *",
                ]
            )
        )
        return (
            f"WITH w AS ({write}) {base.removeprefix('WITH ').replace('WITH ', '', 1)}"
            if (base.startswith("WITH "))
            else f"WITH w AS ({write}) {base}"
        )
    if kind == "lock":
        strength = draw(st.sampled_from(["UPDATE", "SHARE", "NO KEY UPDATE", "KEY SHARE"]))
        return f"SELECT * FROM ({base}) AS q FOR {strength}"
    if kind == "into":
        return f"SELECT * INTO TEMP stolen FROM ({base}) AS q"
    if kind == "parameter":
        return base.replace("t.id", draw(st.sampled_from(["$1", "%s", ":p", "%(p)s"])), 1)
    if kind == "space":
        space = draw(st.sampled_from(["\u00a0", "\u2002", "\u3000", "\u2028", "\x0b"]))
        return base.replace(" ", space, 1)
    if kind == "literal":
        return base.replace("SELECT ", "SELECT 'a\\' , ' || pg_sleep(1)::text --', ", 1)
    return draw(denied_calls_in(base))


@st.composite
def denied_calls_in(draw: st.DrawFn, base: str) -> str:
    """`base` with a denied function call spliced in, in some position and spelling."""
    call = _spell(
        draw(st.sampled_from(DENIED_CALLS)),
        draw(
            st.sampled_from(
                ["plain", "quoted", "upper", "quoted-upper", "pg_catalog", "public", "unicode"]
            )
        ),
    )
    position = draw(
        st.sampled_from(
            ["select", "where", "from", "rows-from", "lateral", "order", "cte", "having"]
        )
    )
    spliced = {
        "select": base.replace("SELECT ", f"SELECT {call} AS x, ", 1),
        "where": f"SELECT * FROM ({base}) AS q WHERE ({call}) IS NULL",
        "from": f"SELECT * FROM ({base}) AS q, {call} AS f",
        "rows-from": f"SELECT * FROM ({base}) AS q, ROWS FROM ({call}) AS f(x)",
        "lateral": f"SELECT * FROM ({base}) AS q CROSS JOIN LATERAL (SELECT {call}) AS f",
        "order": f"SELECT * FROM ({base}) AS q ORDER BY {call}",
        "cte": f"WITH f AS (SELECT {call} AS x) SELECT * FROM f",
        "having": f"SELECT count(*) FROM ({base}) AS q HAVING ({call}) IS NOT NULL",
    }
    return spliced[position]


@given(attacks(), max_rows)
def test_attack_mutations_are_refused(text: str, rows: int) -> None:
    with pytest.raises(ToolFailure):
        policy_check(text, rows)


# --- Any text ---------------------------------------------------------------------------------

sql_soup = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "SELECT",
                "FROM",
                "WHERE",
                "t",
                "v",
                "id",
                "name",
                "(",
                ")",
                ",",
                ";",
                "'",
                '"',
                "$$",
                "$a$",
                "--",
                "/*",
                "*/",
                "\\",
                "E'",
                "U&'",
                'U&"',
                "::",
                "||",
                "1",
                "1e9",
                "LIMIT",
                "ALL",
                "UNION",
                "WITH",
                "AS",
                "lower(",
                "pg_sleep(",
                "*",
                "\n",
                " ",
                "FOR UPDATE",
                "INTO",
                "$1",
                "%s",
                "\u00a0",
                "ROWS FROM (",
                "LATERAL",
            ]
        ),
        st.text(max_size=5),
    ),
    max_size=30,
).map("".join)


@given(sql_soup, max_rows)
def test_any_text_passes_or_is_refused_with_a_problem(text: str, rows: int) -> None:
    try:
        result = policy_check(text, rows)
    except ToolFailure:
        return
    assert result.limit <= rows + 1
