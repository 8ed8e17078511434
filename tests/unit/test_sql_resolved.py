"""The resolved-tree layer against the suite's PostgreSQL (whatever major the fixture runs).

Issue 19, item 1: `(expr).f` is `f(expr)`, `t.f` may be `f(t)`, an operator or a view runs
the function behind it. Every route to a function outside the allowlist is refused before
the query runs; every allowed one still runs. A differential test generates queries over
the fixture's schema and holds the tool to an oracle that reads the resolved tree on its own.
"""

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.code_catalog import builtin_function_names
from mcp_server_suite.tools.sql.functions import first_major_with
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import (
    READER_ROLE,
    PostgresServer,
    database_state,
    reader_settings,
)
from tests.unit.test_sql_tool import query, query_failure

pytestmark = pytest.mark.postgres


def major(server: PostgresServer) -> int:
    with server.connect() as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        return int(row[0]) // 10_000 if row else 0


@pytest.mark.parametrize(
    ("text", "function"),
    [
        # The samples: field selection on a scalar calls the function.
        (
            "SELECT ('SELECT pg_catalog.to_tsvector(pg_catalog.txid_current()::text)'::text)"
            ".ts_stat",
            "ts_stat(text)",
        ),
        (
            "SELECT pid, (pid).pg_terminate_backend FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid()",
            "pg_terminate_backend(integer",
        ),
        # Every route the issue lists, through field selection.
        ("SELECT (1::int8).pg_advisory_lock", "pg_advisory_lock(bigint)"),
        ("SELECT (0.5::float8).setseed", "setseed(double precision)"),
        ("SELECT (0.01::float8).pg_sleep", "pg_sleep(double precision)"),
        ("SELECT ('public.t'::regclass).pg_relation_filepath", "pg_relation_filepath(regclass)"),
        ("SELECT (pg_backend_pid()).pg_cancel_backend", "pg_cancel_backend(integer"),
        ("SELECT (id).pg_terminate_backend FROM t WHERE id = 0", "pg_terminate_backend(integer"),
        # A view that calls a function nobody allowed.
        ("SELECT * FROM v_evil", "public.evil()"),
        # An unstoppable function reached without its name being called.
        ("SELECT ('abc'::text).reverse, ('<a/>'::text).xml_is_well_formed", "xml_is_well_formed"),
    ],
)
def test_every_route_to_a_refused_function_is_refused_before_it_runs(
    postgres_server: PostgresServer, text: str, function: str
) -> None:
    before = database_state(postgres_server)
    failure = query_failure(reader_settings(postgres_server), text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert f"The function {function}" in failure.problem.detail
    after = database_state(postgres_server)
    # No transaction id taken, no advisory lock, no row, sequence or large object changed.
    # (The WAL position moves with the server's own background records.)
    assert (after.tables, after.sequences, after.large_objects) == (
        before.tables,
        before.sequences,
        before.large_objects,
    )
    assert (after.advisory_locks, after.next_xid) == (before.advisory_locks, before.next_xid)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("SELECT ('abc'::text).upper", [["ABC"]]),
        ("SELECT (id).abs FROM t WHERE id = 1", [[1]]),
        ("SELECT t.row_to_json FROM t WHERE id = 1", [[{"id": 1, "name": "n1", "secret": "s1"}]]),
        ("SELECT 2147483648 + 1, 9223372036854775808 + 1", [[2147483649, "9223372036854775809"]]),
        ("SELECT * FROM v WHERE id = 2", [[2, "n2"]]),
        ("SELECT name FROM t ORDER BY 1 LIMIT 1", [["n1"]]),
        ("SELECT count(*) FROM information_schema.tables WHERE table_name = 't'", [[1]]),
        (
            "SELECT format('%s-%s', 1, 2), repeat('ab', 2), lpad('x', 3, '-')",
            [["1-2", "abab", "--x"]],
        ),
    ],
)
def test_allowed_routes_still_run(
    postgres_server: PostgresServer, text: str, rows: list[list[Any]]
) -> None:
    assert query(reader_settings(postgres_server), text).rows == rows


@pytest.fixture
def escaping_operator(postgres_server: PostgresServer) -> Iterator[str]:
    # Issue 19, item 3: a view whose operator is implemented by an escaping built-in.
    with postgres_server.connect() as conn:
        conn.execute(
            "CREATE OPERATOR public.#!# (LEFTARG = integer, RIGHTARG = bigint, "
            "FUNCTION = pg_catalog.pg_terminate_backend)"
        )
        conn.execute(
            "CREATE VIEW public.v_op AS SELECT pid #!# 0::bigint AS killed "
            "FROM pg_catalog.pg_stat_activity WHERE pid = 0"
        )
        conn.execute(f"GRANT SELECT ON public.v_op TO {READER_ROLE}")
    try:
        yield "v_op"
    finally:
        with postgres_server.connect() as conn:
            conn.execute("DROP VIEW public.v_op")
            conn.execute("DROP OPERATOR public.#!# (integer, bigint)")


def test_a_view_whose_operator_runs_an_escaping_function_is_refused(
    postgres_server: PostgresServer, escaping_operator: str
) -> None:
    text = f"SELECT * FROM {escaping_operator}"  # noqa: S608  # A fixture's view name.
    failure = query_failure(reader_settings(postgres_server), text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert "The function pg_terminate_backend(integer,bigint)" in failure.problem.detail
    assert "an operator" in failure.problem.detail


def test_later_majors_features_run_where_the_server_has_them(
    postgres_server: PostgresServer,
) -> None:
    settings = reader_settings(postgres_server)
    server_major = major(postgres_server)
    cases = [
        ("SELECT any_value(x) FROM (VALUES (1)) AS s(x)", [[1]]),
        ("SELECT casefold('ABC')", [["abc"]]),
        ("SELECT uuid_extract_version(gen_random_uuid())", [[4]]),
        ("SELECT uuidv7() IS NOT NULL", [[True]]),
        ("SELECT erf(0)", [[0.0]]),
        ("SELECT array_sample(ARRAY[1], 1)", [[[1]]]),
        ("SELECT date_add('2024-01-01'::timestamptz, '1 day')", [["2024-01-02T00:00:00+00:00"]]),
    ]
    for text, rows in cases:
        name = re.match(r"SELECT (\w+)\(", text)
        assert name is not None
        since = first_major_with(name.group(1))
        assert since is not None
        if server_major >= since:
            assert query(settings, text).rows == rows, text
        else:
            failure = query_failure(settings, text)
            assert f"needs PostgreSQL {since} or later" in failure.problem.detail, text


# --- The differential test ------------------------------------------------------------------

# One-argument functions, each with an argument of a type it takes: allowed ones, and ones
# outside the allowlist (denied by name, monitoring internals, unstoppable, planted).
_ALLOWED_ONE_ARGUMENT: Final = {
    "upper": "name",
    "lower": "'X'::text",
    "length": "name",
    "md5": "'x'::text",
    "abs": "id",
    "reverse": "name",
    "initcap": "'ab cd'::text",
}
_REFUSED_ONE_ARGUMENT: Final = {
    "ts_stat": "'SELECT pg_catalog.to_tsvector(''a'')'::text",
    "pg_sleep": "0.001::float8",
    "setseed": "0.5::float8",
    "pg_relation_filepath": "'public.t'::regclass",
    "pg_advisory_unlock": "42::int8",
    "xml_is_well_formed": "'<a/>'::text",
    "pg_stat_get_numscans": "'public.t'::regclass::oid",
    "pg_terminate_backend": "0",
    "evil_cast": "id",
}
_FUNCTIONS: Final = {**_ALLOWED_ONE_ARGUMENT, **_REFUSED_ONE_ARGUMENT}
_SCALARS: Final = ("name", "id", "'x'::text", "42::int8", "0.5::float8")
_RELATIONS: Final = ("t", "v", "v_evil")
# An object id in a resolved tree that names a function (funcid, aggfnoid, winfnoid,
# opfuncid, hash and negation functions, TABLESAMPLE handlers, in_range functions).
_FUNCTION_FIELDS: Final = re.compile(
    r":(?:funcid|aggfnoid|winfnoid|opfuncid|hashfuncid|negfuncid|tsmhandler|"
    r"startInRangeFunc|endInRangeFunc)\s+(\d+)"
)


@st.composite
def generated_queries(draw: st.DrawFn) -> str:
    relation = draw(st.sampled_from(_RELATIONS))
    items = []
    for _ in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(("field", "field", "call", "attribute", "cast", "operator")))
        function = draw(st.sampled_from(sorted(_FUNCTIONS)))
        # Mostly an argument the function takes, sometimes any.
        argument = draw(st.sampled_from((_FUNCTIONS[function], *_SCALARS)))
        if relation != "t" and argument in ("name", "id"):
            argument = "'x'::text" if argument == "name" else "1"
        if form == "field":
            items.append(f"({argument}).{function}")
        elif form == "call":
            items.append(f"{function}({argument})")
        elif form == "attribute":
            items.append(f"{relation}.{draw(st.sampled_from(('leak', 'row_to_json', 'to_jsonb')))}")
        elif form == "cast":
            items.append(f"({argument})::{draw(st.sampled_from(('text', 'int8', 'mood')))}")
        else:
            items.append(f"{argument} {draw(st.sampled_from(('||', '=', '<')))} {argument}")
    return f"SELECT {', '.join(items)} FROM {relation} LIMIT 1"  # noqa: S608  # Generated from constants.


class Oracle:
    # What a query resolves to, read by a superuser's session with a regular expression: a
    # reading of the tree independent of node_text.py and resolution.py.

    def __init__(self, server: PostgresServer) -> None:
        self.conn = psycopg.connect(server.superuser_dsn, autocommit=True)
        self.trees: list[str] = []
        self.conn.add_notice_handler(self._notice)
        row = self.conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        names = sorted(builtin_function_names(int(row[0]) // 10_000 if row else 0))
        self.allowed = {
            int(oid)
            for (oid,) in self.conn.execute(
                "SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace "
                "AND p.proname = ANY(%s)",
                [names],
            ).fetchall()
        }

    def _notice(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.message_primary == "rewritten parse tree:":
            self.trees.append(diagnostic.message_detail or "")

    def refused_functions(self, text: str) -> set[int] | None:
        # The functions outside the allowlist the query resolves to, or None when PostgreSQL
        # cannot resolve it (the tool must refuse it then too).
        self.trees.clear()
        self.conn.execute("BEGIN")
        try:
            self.conn.execute("SET LOCAL search_path = pg_catalog, public")
            self.conn.execute("SET LOCAL client_min_messages = log")
            self.conn.execute("SET LOCAL debug_print_rewritten = on")
            self.conn.execute(f"PREPARE oracle AS {text}")  # Generated constants.
            self.conn.execute("DEALLOCATE oracle")
        except psycopg.Error:
            return None
        finally:
            self.conn.execute("ROLLBACK")
        found = {int(oid) for tree in self.trees for oid in _FUNCTION_FIELDS.findall(tree)}
        return found - self.allowed

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module")
def oracle(postgres_server: PostgresServer) -> Iterator[Oracle]:
    found = Oracle(postgres_server)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(scope="module")
def reader_tool(
    postgres_server: PostgresServer,
) -> Iterator[tuple[SQLTool, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    tool = SQLTool(reader_settings(postgres_server, sql_schemas=("public",)))
    try:
        yield tool, loop
    finally:
        loop.run_until_complete(tool.aclose())
        loop.close()


@given(text=generated_queries())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_no_query_resolving_to_a_refused_function_ever_runs(
    postgres_server: PostgresServer,
    oracle: Oracle,
    reader_tool: tuple[SQLTool, asyncio.AbstractEventLoop],
    text: str,
) -> None:
    tool, loop = reader_tool
    refused = oracle.refused_functions(text)
    before = database_state(postgres_server)
    try:
        result = loop.run_until_complete(tool.run(ReadOnlySQLParams(query=text)))
    except ToolFailure as failure:
        outcome = failure.problem
        ran = False
    else:
        ran = True
    assert database_state(postgres_server).tables == before.tables
    if refused is None or refused:
        # PostgreSQL cannot resolve it, or it resolves to a function outside the allowlist.
        assert not ran, (text, refused)
    elif not ran:
        # Resolved to allowed code only: it runs, unless the policy refused a spelling (a
        # qualified type) or PostgreSQL refused its data (a permission, a cast's value).
        assert outcome.code in (
            MCPErrorCode.VALIDATION_ERROR,
            MCPErrorCode.ACCESS_DENIED,
            MCPErrorCode.QUERY_VIOLATION,
        ), (text, outcome)
        if outcome.code is MCPErrorCode.QUERY_VIOLATION:
            assert "resolved" not in outcome.detail, (text, outcome.detail)
    else:
        assert json.dumps(result.rows)


# --- Item 7: what an analyst could not do -------------------------------------------------

# SQL/JSON syntax, with the first major that reads it and its result there.
_JSON_SYNTAX: Final = [
    (16, "SELECT JSON_OBJECT('a': 1) AS j", [[{"a": 1}]]),
    (16, "SELECT JSON_ARRAYAGG(x ORDER BY x) AS j FROM (VALUES (2), (1)) AS s(x)", [[[1, 2]]]),
    (16, "SELECT JSON_OBJECTAGG(k : v) AS j FROM (VALUES ('a', 1)) AS s(k, v)", [[{"a": 1}]]),
    (16, "SELECT '{}' IS JSON OBJECT AS j", [[True]]),
    (17, "SELECT JSON_VALUE('{\"a\": 7}', '$.a' RETURNING int) AS j", [[7]]),
    (
        17,
        "SELECT * FROM JSON_TABLE('[1, 2]'::jsonb, '$[*]' COLUMNS (a int PATH '$')) AS j",
        [[1], [2]],
    ),
]


@pytest.mark.parametrize(("since", "text", "rows"), _JSON_SYNTAX)
def test_sql_json_runs_where_the_server_has_it_and_is_named_where_not(
    postgres_server: PostgresServer, since: int, text: str, rows: list[list[Any]]
) -> None:
    settings = reader_settings(postgres_server)
    if major(postgres_server) >= since:
        assert query(settings, text).rows == rows
    else:
        failure = query_failure(settings, text)
        assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
        assert f"needs PostgreSQL {since} or later" in failure.problem.detail
        assert "construct of this query" not in failure.problem.detail


def test_show_is_current_setting(postgres_server: PostgresServer) -> None:
    settings = reader_settings(postgres_server)
    shown = query(settings, "SHOW timezone").rows
    assert shown == query(settings, "SELECT current_setting('TimeZone')").rows == [["UTC"]]
    assert query(settings, "SHOW TRANSACTION ISOLATION LEVEL").rows == [["read committed"]]
    failure = query_failure(settings, "SHOW data_directory")
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert query_failure(settings, "SHOW ALL").problem.detail.startswith("SHOW ALL")


def test_types_of_the_exposed_schemas_are_named_like_relations(
    postgres_server: PostgresServer,
) -> None:
    settings = reader_settings(postgres_server)
    assert query(settings, "SELECT 'a'::public.mood AS m").rows == [["a"]]
    assert query(settings, "SELECT enum_range(NULL::public.mood) AS r").rows == [["{a}"]]
    # Unqualified, as relations are (tests/unit/test_sql_types.py has the rest).
    assert query(settings, "SELECT 'a'::mood AS m").rows == [["a"]]
    # The cast from integer runs planted code: refused as PostgreSQL resolves it, named
    # either way.
    for text in ("SELECT 1::public.mood", "SELECT 1::mood"):
        planted = query_failure(settings, text)
        assert planted.problem.code is MCPErrorCode.QUERY_VIOLATION
        assert "public.evil_cast(integer)" in planted.problem.detail
        assert "a cast" in planted.problem.detail


def test_a_name_in_a_string_gets_the_hint_that_fits(postgres_server: PostgresServer) -> None:
    settings = reader_settings(postgres_server)
    failure = query_failure(settings, "SELECT 'v'::regclass")
    assert "named in a string" in failure.problem.detail
    assert "('public.v')" in failure.problem.detail
    assert "sql_schema lists them" not in failure.problem.detail
    assert query(settings, "SELECT 'public.v'::regclass::text AS r").rows == [["public.v"]]
