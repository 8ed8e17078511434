"""`read_only_sql`: the contract table, the policy, the statement that runs, and the tool end
to end against the throwaway PostgreSQL server.

This is the module the mutation checks run: letting a second statement through, dropping the
row cap or the byte bound, or skipping the second parse must make it fail
(`scripts/mutations.toml`).

The row cap: the statement that runs wraps the caller's query, and the wrapper carries
`LIMIT max_rows + 1` below the byte bound (`tools/sql/statement.py`); the caller receives at
most `max_rows` rows, and `truncated` is true exactly when the extra row exists. The design
document's table writes the cap as "LIMIT 50": that is what the caller sees.
"""

# ruff: noqa: S608
# (The tests build SQL text on purpose: hostile queries are what they feed the policy.)

import asyncio
import contextlib
import json
import logging
import operator
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_server_suite.config import ConfigError, SecretStr, Settings
from mcp_server_suite.schemas.errors import DeadlineExceeded, ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams, ReadOnlySQLResult
from mcp_server_suite.tools.sql import build_sql_tool
from mcp_server_suite.tools.sql.functions import BUILTIN_FUNCTIONS, DENIED_FUNCTIONS
from mcp_server_suite.tools.sql.policy import CheckedTree, FunctionPolicy, parse_tree_json
from mcp_server_suite.tools.sql.statement import (
    ExecutableStatement,
    PolicyDefect,
    RelationCatalog,
    render_statement,
)
from mcp_server_suite.tools.sql.tool import SQLTool, check_untrusted_sql
from tests.support.postgres import (
    PASSWORD_ROLE,
    PASSWORD_ROLE_SECRET,
    PostgresServer,
    database_state,
    reader_settings,
)

T = TypeVar("T")

POLICY = FunctionPolicy()
SCHEMAS = ("public", "reporting")
CATALOG = RelationCatalog(
    SCHEMAS,
    [
        ("public", "t"),
        ("public", "users"),
        ("reporting", "users"),
        ("reporting", "sales"),
        ("pg_catalog", "pg_class"),
        ("public", "pg_class"),
    ],
)


def checked(query: str, max_rows: int = 50, budget: int = 1_048_576) -> ExecutableStatement:
    tree = check_untrusted_sql(query, functions=POLICY, schemas=SCHEMAS)
    return render_statement(tree, CATALOG, max_rows=max_rows, max_result_bytes=budget)


def inner(statement: ExecutableStatement) -> str:
    # The caller's query as it runs, inside the wrapper.
    start = statement.sql.index("FROM (\n") + len("FROM (\n")
    return statement.sql[start : statement.sql.index("\n) AS q LIMIT")]


def refusal(query: str) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        checked(query)
    return caught.value


def run_with_tool(settings: Settings, body: Callable[[SQLTool], Awaitable[T]]) -> T:
    async def main() -> T:
        tool = SQLTool(settings)
        try:
            return await body(tool)
        finally:
            await tool.aclose()

    return asyncio.run(main())


def query(settings: Settings, text: str, max_rows: int = 50) -> ReadOnlySQLResult:
    return run_with_tool(
        settings, lambda tool: tool.run(ReadOnlySQLParams(query=text, max_rows=max_rows))
    )


def query_failure(settings: Settings, text: str, max_rows: int = 50) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        query(settings, text, max_rows)
    return caught.value


# --- The design document's table -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "executed", "rows"),
    [
        ("SELECT id, name FROM users", 'SELECT id, name FROM "public".users', 51),
        ("SELECT * FROM t LIMIT 10", 'SELECT * FROM "public".t LIMIT 10', 51),
        ("SELECT * FROM t LIMIT 500", 'SELECT * FROM "public".t LIMIT 500', 51),
    ],
)
def test_contract_table_limits(text: str, executed: str, rows: int) -> None:
    statement = checked(text)
    assert inner(statement) == executed
    assert f") AS q LIMIT {rows})" in statement.sql


def test_contract_table_refuses_a_second_statement() -> None:
    failure = refusal("SELECT 1; DROP TABLE t")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith("Exactly one statement is allowed")
    assert failure.problem.invalid_params == ("query",)


def test_contract_table_refuses_a_write_in_a_cte() -> None:
    failure = refusal("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith("DELETE is not allowed")


def test_contract_table_refuses_pg_sleep() -> None:
    failure = refusal("SELECT pg_sleep(10)")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith("Function pg_sleep() is not allowed")


# --- The policy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1; DROP TABLE victim",
        "SELECT 1; SELECT 2",
        "SELECT 1;/*;*/SELECT 2",
        "COMMIT; DROP TABLE victim",
        "SELECT 'a\\'; DROP TABLE victim; --'",
    ],
)
def test_more_than_one_statement_is_refused(text: str) -> None:
    assert refusal(text).problem.code is MCPErrorCode.QUERY_VIOLATION


@pytest.mark.parametrize(
    "text", ["SELECT 1;", "SELECT 1;;", ";SELECT 1", "SELECT 1; -- a trailing comment"]
)
def test_empty_statements_and_trailing_comments_are_not_statements(text: str) -> None:
    assert inner(checked(text)).startswith("SELECT 1")


@pytest.mark.parametrize("text", ["-- only a comment", ";", "/* nothing */ ;;", "SELEC 1"])
def test_no_statement_is_a_validation_error(text: str) -> None:
    assert refusal(text).problem.code is MCPErrorCode.VALIDATION_ERROR


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("INSERT INTO t VALUES (1)", "INSERT"),
        ("  /* c */ update t SET a = 1", "UPDATE"),
        ("DO $$ BEGIN END $$", "DO"),
        ("LISTEN x", "LISTEN"),
        ("SET search_path = public", "SET"),
        ("SHOW ALL", "SHOW ALL"),
        ("FETCH ALL FROM mcp_read_only_sql", "FETCH"),
        ("COPY t TO STDOUT", "COPY"),
        ("DISCARD ALL", "DISCARD"),
        ("PREPARE p AS SELECT 1", "PREPARE"),
    ],
)
def test_other_statements_are_refused_by_their_keyword(text: str, shown: str) -> None:
    failure = refusal(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith(f"{shown} is not allowed")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SELECT * FROM t FOR UPDATE", "row lock"),
        ("SELECT (SELECT 1 FROM t FOR SHARE)", "row lock"),
        ("SELECT * INTO x FROM t", "SELECT INTO"),
        ("SELECT $1", "bind parameter"),
        ("SELECT xmlelement(name a)", "XML constructor"),
        ("SELECT '<a/>'::xml", "xml type"),
        ("SELECT CAST('<a/>' AS pg_catalog.xml)", "xml type"),
        ("SELECT 1 OPERATOR(public.+) 2", "OPERATOR(public."),
        ("SELECT 1::evidence.mood", "type evidence.mood"),
        ("SELECT 'a' COLLATE public.c", "collation public.c"),
        ("SELECT * FROM evidence.log", "relation evidence.log"),
        ("SELECT * FROM app.public.t", "schema only, not a database"),
        ("SELECT public.lower('x')", "public.lower()"),
        ("SELECT \"LOWER\"('x')", "'LOWER'()"),
        ("SELECT * FROM t ORDER BY id USING OPERATOR(public.<)", "OPERATOR(public."),
        ("SELECT * FROM t TABLESAMPLE public.system_rows(1)", "public.system_rows()"),
        ("SELECT * FROM XMLTABLE('/a' PASSING '<a/>' COLUMNS x int)", "XMLTABLE"),
        ("EXPLAIN ANALYZE SELECT 1", "EXPLAIN ANALYZE"),
        ("EXPLAIN (BUFFERS) SELECT 1", "EXPLAIN option"),
        ("EXPLAIN (FORMAT XML) SELECT 1", "FORMAT TEXT and FORMAT JSON only"),
        ("EXPLAIN DELETE FROM t", "EXPLAIN is allowed only"),
    ],
)
def test_constructs_outside_the_allowlists_are_refused(text: str, fragment: str) -> None:
    failure = refusal(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert fragment in failure.problem.detail


@pytest.mark.parametrize(
    "text",
    [
        # The legitimate queries the sqlglot policy refused or rewrote (issue 9, section 3).
        "SELECT count(meta->'x'), jsonb_typeof(meta->'coupon') FROM t",
        "SELECT '{\"a\": [1, 2]}'::jsonb @? '$.a[*] ? (@ > 1)', '{\"a\": 1}'::jsonb #- '{a}'",
        "SELECT @ -5, |/ 25.0, ||/ 27.0",
        "SELECT regexp_replace('C:\\temp', '\\\\', '/')",
        "SELECT\f1\fFROM\ft",
        "VALUES (1, 'a'), (2, 'b')",
        "SELECT format('%s-%s', 1, 2), lpad('x', 3), rpad('x', 3), repeat('ab', 2)",
        'SELECT 1 AS U&"a\\0062c"',
        "SELECT date_part('year', now()), now()",
        "TABLE t",
        "SELECT * FROM t TABLESAMPLE bernoulli(10) REPEATABLE (1)",
        "EXPLAIN SELECT * FROM t",
        "EXPLAIN (FORMAT JSON, VERBOSE, COSTS off) SELECT * FROM t",
        "EXPLAIN VERBOSE (SELECT 1)",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
        "SEARCH DEPTH FIRST BY n SET ord SELECT * FROM r",
        "SELECT sum(id) OVER w, rank() OVER (PARTITION BY name ORDER BY id) FROM t "
        "WINDOW w AS (ORDER BY id)",
        "SELECT * FROM ROWS FROM (generate_series(1, 3), unnest(ARRAY['a'])) WITH ORDINALITY",
        "SELECT * FROM json_to_record('{}') AS x(a int, b text)",
        "SELECT n.summary FROM t AS n",
    ],
)
def test_legitimate_queries_pass_the_policy(text: str) -> None:
    checked(text)


def test_regeneration_never_changes_meaning() -> None:
    # The text that runs is the caller's own, with schemas inserted: date_part stays
    # date_part, a quoted "LOWER" stays quoted (and is refused), now(1) stays now(1).
    assert inner(checked("SELECT date_part('year', now())")) == "SELECT date_part('year', now())"
    assert inner(checked("SELECT now(1)")) == "SELECT now(1)"
    assert inner(checked('SELECT 1 AS U&"a\\0062c"')) == 'SELECT 1 AS U&"a\\0062c"'
    assert inner(checked("SELECT 'C:\\t' /* note */")) == "SELECT 'C:\\t' /* note */"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT * FROM users", 'SELECT * FROM "public".users'),
        ("SELECT * FROM sales", 'SELECT * FROM "reporting".sales'),
        ("SELECT * FROM pg_class", "SELECT * FROM pg_class"),
        ("SELECT * FROM nosuch", "SELECT * FROM nosuch"),
        ("SELECT * FROM ONLY users", 'SELECT * FROM ONLY "public".users'),
        ('SELECT * FROM "users", users*', 'SELECT * FROM "public"."users", "public".users*'),
        ('SELECT * FROM U&"\\0075sers"', 'SELECT * FROM "public".U&"\\0075sers"'),
        ("TABLE users", 'TABLE "public".users'),
        (
            "WITH users AS (SELECT 1) SELECT * FROM users",
            "WITH users AS (SELECT 1) SELECT * FROM users",
        ),
        ("SELECT users.id FROM users", 'SELECT users.id FROM "public".users'),
        ("SELECT * FROM reporting.users", "SELECT * FROM reporting.users"),
        ("SELECT 'é', * FROM users", "SELECT 'é', * FROM \"public\".users"),
    ],
)
def test_relations_are_qualified_as_the_search_path_would(text: str, expected: str) -> None:
    assert inner(checked(text)) == expected


def test_the_wrapper_bounds_rows_and_bytes() -> None:
    statement = checked("SELECT * FROM t", max_rows=7, budget=4096)
    assert statement.max_rows == 7
    assert ") AS q LIMIT 8)" in statement.sql
    assert statement.sql.endswith("OPERATOR(pg_catalog.<=) 4096")
    assert "(q.*)::pg_catalog.record" in statement.sql


def test_explain_runs_the_qualified_query_with_the_rendered_options() -> None:
    statement = checked("EXPLAIN (costs 0, format json) SELECT * FROM users")
    assert statement.explain_format == "json"
    assert statement.sql == 'EXPLAIN (COSTS FALSE, FORMAT JSON)\nSELECT * FROM "public".users'


def test_a_text_that_would_parse_differently_is_a_defect(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_server_suite.tools.sql import policy, statement

    # A second parse whose query differs from the checked one, or whose wrapper does, stands
    # in for any splice gone wrong: each is a defect, and nothing runs.
    original = policy.parse_tree_text

    def query_differs(text: str) -> str:
        tree = original(text)
        return tree.replace('{"ival":7}', '{"ival":8}') if "LIMIT" in text else tree

    monkeypatch.setattr(statement, "parse_tree_text", query_differs)
    with pytest.raises(PolicyDefect):
        checked("SELECT 7 AS seven")

    def wrapper_differs(text: str) -> str:
        tree = original(text)
        return tree.replace('"mcp_row_bytes"', '"mcp_row_bites"') if "seven" in text else tree

    monkeypatch.setattr(statement, "parse_tree_text", wrapper_differs)
    with pytest.raises(PolicyDefect):
        checked("SELECT 7 AS seven")

    real = policy.parse_tree_json

    def explained_query_differs(text: Any) -> Any:
        tree = real(text)
        if str(text).startswith("EXPLAIN"):
            tree["stmts"][0]["stmt"]["ExplainStmt"]["query"]["SelectStmt"]["targetList"] = []
        return tree

    monkeypatch.setattr(statement, "parse_tree_json", explained_query_differs)
    with pytest.raises(PolicyDefect):
        checked("EXPLAIN SELECT 7")


def test_a_statement_that_is_not_one_statement_is_a_defect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_server_suite.tools.sql import statement

    monkeypatch.setattr(statement, "parse_tree_text", lambda text: '{"version":1,"stmts":[]}')
    with pytest.raises(PolicyDefect):
        checked("SELECT 1")
    monkeypatch.setattr(statement, "parse_tree_json", lambda text: {"stmts": []})
    with pytest.raises(PolicyDefect):
        checked("EXPLAIN SELECT 1")


_NAMES = st.sampled_from(sorted(BUILTIN_FUNCTIONS))
_SCHEMAS = st.from_regex(r"[a-oq-z][a-z0-9_]{0,10}", fullmatch=True)


@given(name=_NAMES, schema=_SCHEMAS)
def test_a_builtin_name_qualified_with_another_schema_is_refused(name: str, schema: str) -> None:
    # Any planted overload reached by qualifying a built-in's name with its schema. The schema
    # is quoted, so that one spelled like a reserved word ("on") is a schema, not a syntax error.
    failure = refusal(f'SELECT "{schema}".{name}(1)')
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION


@given(name=st.sampled_from(sorted(DENIED_FUNCTIONS)), quoted=st.booleans(), upper=st.booleans())
def test_denied_names_are_refused_in_every_spelling(name: str, quoted: bool, upper: bool) -> None:
    spelled = name.upper() if upper and not quoted else name
    text = f'SELECT "{spelled}"(1)' if quoted else f"SELECT pg_catalog.{spelled}(1)"
    assert refusal(text).problem.code is MCPErrorCode.QUERY_VIOLATION


@given(symbol=st.sampled_from(["+", "=", "||", "~~", "@>", "<->", "#", "-", "!!"]), schema=_SCHEMAS)
def test_an_operator_qualified_with_another_schema_is_refused(symbol: str, schema: str) -> None:
    # Quoted, as above: a schema spelled like a reserved word ("to") is still a schema.
    assert "OPERATOR(" in refusal(f'SELECT 1 OPERATOR("{schema}".{symbol}) 2').problem.detail


@given(st.text(max_size=200))
@example("Stmt")
def test_any_text_is_checked_or_refused_in_band(text: str) -> None:
    # The policy's only failure is a ToolFailure whose detail quotes no parser internals.
    # A detail may quote the caller's own text (a syntax error names the token it met), so
    # a word the text itself holds is not counted as a leak.
    try:
        checked(text)
    except ToolFailure as failure:
        detail = failure.problem.detail
        for internal in (r"Stmt\b", "<class", r"\bNode\b", "A_Expr", "ResTarget"):
            if not re.search(internal, text):
                assert not re.search(internal, detail), detail


@given(
    st.lists(
        st.sampled_from(
            ["t", "users", "sales", "pg_class", "nosuch", '"users"', "public.t", "ONLY sales"]
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["", " -- c", " /* c */", "\n"]),
)
def test_what_runs_parses_to_the_checked_tree_plus_schemas(relations: list[str], tail: str) -> None:
    statement = checked(f"SELECT 1 FROM {', '.join(relations)}{tail}")
    # One statement, whose query names every relation qualified or left for pg_catalog.
    tree = parse_tree_json(statement.sql)
    assert len(tree["stmts"]) == 1
    assert inner(statement).count('"public".') + inner(statement).count('"reporting".') >= sum(
        1 for r in relations if r in {"t", "users", '"users"', "ONLY sales"}
    )


# --- Arguments and results ------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "SELEC"},
        {"query": "x" * 10_001},
        {"query": "SELECT\x001"},
        {"query": "      \n\t  "},
        {"query": "SELECT 1", "max_rows": 0},
        {"query": "SELECT 1", "max_rows": 51},
        {"query": "SELECT 1", "max_rows": "5"},
        {"query": "SELECT 1", "limit": 5},
    ],
)
def test_arguments_outside_the_contract_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ReadOnlySQLParams.model_validate_json(json.dumps(arguments))


def test_argument_defaults() -> None:
    assert ReadOnlySQLParams(query="SELECT 1").max_rows == 50


@pytest.mark.parametrize(
    "result",
    [
        {"columns": ["a"], "rows": [[1]], "row_count": 2, "truncated": False},
        {"columns": ["a"], "rows": [[1, 2]], "row_count": 1, "truncated": False},
        {"columns": ["a"], "rows": [[1]] * 51, "row_count": 51, "truncated": True},
        {"columns": ["a"], "rows": [[1]], "row_count": 1, "truncated": True},
        {
            "columns": ["a"],
            "rows": [],
            "row_count": 0,
            "truncated": False,
            "truncated_reason": "max_rows",
        },
    ],
)
def test_result_contract_is_checked(result: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ReadOnlySQLResult.model_validate(result)


# --- Building the tool -----------------------------------------------------------------------


def test_build_sql_tool_describes_the_tool() -> None:
    spec = build_sql_tool(Settings(sql_dsn=SecretStr("postgresql://u@/db?host=/nonexistent")))
    assert spec.name == "read_only_sql"
    assert spec.params_model is ReadOnlySQLParams
    assert spec.result_model is ReadOnlySQLResult
    close = spec.close
    assert close is not None

    async def close_it() -> None:
        await close()  # Closing a tool that never ran is a no-op.

    asyncio.run(close_it())


@pytest.mark.parametrize("entry", ["pg_sleep", "public.dblink_exec", "lo_import", "set_config"])
def test_denied_extra_functions_stop_the_server(entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"MCP_SQL_ALLOWED_FUNCTIONS": f"abs,{entry}"})
    assert caught.value.variable == "MCP_SQL_ALLOWED_FUNCTIONS"


def test_a_denied_extra_function_exits_78_at_start_up() -> None:
    import os

    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(MCP_SQL_DSN="postgresql://u@/db", MCP_SQL_ALLOWED_FUNCTIONS="abs,pg_sleep")
    result = subprocess.run(
        [sys.executable, "-m", "mcp_server_suite"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert result.returncode == 78
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "MCP_SQL_ALLOWED_FUNCTIONS='pg_sleep'" in lines[0]


def test_tool_needs_a_dsn() -> None:
    with pytest.raises(ConfigError):
        SQLTool(Settings())


def test_importing_the_tool_loads_no_sql_stack() -> None:
    # A fresh interpreter: the suite itself has loaded everything long ago.
    code = (
        "import sys, mcp_server_suite.tools.sql, mcp_server_suite.tools.sql.functions;"
        "from mcp_server_suite.tools import build_registry;"
        "from mcp_server_suite.config import Settings;"
        "Settings.from_environ({'MCP_SQL_ALLOWED_FUNCTIONS': 'abs'});"
        "loaded = [m for m in sys.modules if m.split('.')[0] in"
        " ('pglast', 'psycopg', 'psycopg_pool', 'pydantic')];"
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Against the server ----------------------------------------------------------------------


@pytest.mark.postgres
def test_cap_truncates_and_says_so(postgres_server: PostgresServer) -> None:
    settings = reader_settings(postgres_server)
    result = query(settings, "SELECT * FROM t ORDER BY id")
    assert result.row_count == len(result.rows) == 50
    assert result.truncated is True
    assert result.columns == ["id", "name", "secret"]
    assert result.rows[0] == [1, "n1", "s1"]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("text", "max_rows", "rows", "truncated"),
    [
        ("SELECT * FROM t WHERE id <= 50", 50, 50, False),
        ("SELECT * FROM t WHERE id <= 51", 50, 50, True),
        ("SELECT * FROM t ORDER BY id LIMIT 50", 50, 50, False),
        ("SELECT * FROM t ORDER BY id LIMIT 51", 50, 50, True),
        ("SELECT * FROM t ORDER BY id LIMIT 10", 50, 10, False),
        ("SELECT * FROM t ORDER BY id LIMIT 500", 50, 50, True),
        ("SELECT * FROM t LIMIT ALL", 50, 50, True),
        ("SELECT * FROM t WHERE id <= 5", 5, 5, False),
        ("SELECT * FROM t WHERE id <= 6", 5, 5, True),
        ("SELECT * FROM t LIMIT 0", 5, 0, False),
        (
            "SELECT g FROM generate_series(1, 30) AS g "
            "UNION ALL SELECT g FROM generate_series(1, 30) AS g",
            50,
            50,
            True,
        ),
        ("SELECT 1 UNION SELECT 2 LIMIT 100", 50, 2, False),
    ],
)
def test_truncated_is_exact(
    postgres_server: PostgresServer, text: str, max_rows: int, rows: int, truncated: bool
) -> None:
    result = query(reader_settings(postgres_server), text, max_rows)
    assert (result.row_count, result.truncated) == (rows, truncated)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "text",
    [
        "SELECT generate_series(1, 1000000000000)",
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT * FROM r",
    ],
)
def test_the_server_stops_after_the_cap(postgres_server: PostgresServer, text: str) -> None:
    started = time.monotonic()
    result = query(reader_settings(postgres_server, sql_query_timeout=30.0), text)
    assert (result.row_count, result.truncated) == (50, True)
    # Unbounded, these run until the statement timeout; capped, they take milliseconds. (A
    # set-returning function in FROM is materialised whole before its first row; there the
    # statement timeout and the role's temp_file_limit are the bound, see test_sql_layers.)
    assert time.monotonic() - started < 5


@pytest.mark.postgres
def test_a_second_statement_never_reaches_the_server(postgres_server: PostgresServer) -> None:
    before = database_state(postgres_server)
    failure = query_failure(reader_settings(postgres_server), "SELECT 1; DROP TABLE victim")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert database_state(postgres_server).tables == before.tables


@pytest.mark.postgres
def test_statements_go_over_the_extended_protocol(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import fetch_read_only
    from mcp_server_suite.tools.sql.values import make_adapters

    marker = f"protocol-{uuid.uuid4().hex}"
    query(reader_settings(postgres_server), f"SELECT '{marker}' AS marker")
    # A log entry continues on lines that begin with a tab; the query sits on its own line.
    entries = re.split(r"\n(?!\t)", postgres_server.log_text())
    logged = [entry for entry in entries if marker in entry]
    # The statement's executions, and the statement the probe's description of it
    # (`probe.py`) was logged for (a STATEMENT line); nothing ran as a simple query.
    executed = [entry for entry in logged if " STATEMENT: " not in entry]
    assert executed, "the server logged the statement"
    assert all("execute <unnamed>: SELECT r.*" in entry for entry in executed), logged
    assert not any("statement: " in entry for entry in logged), logged

    # The proof that matters: a second statement is refused by PostgreSQL itself.
    async def stacked() -> None:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.superuser_dsn, autocommit=True, context=make_adapters()
        )
        try:
            await fetch_read_only(
                conn,
                "SELECT 1; DROP TABLE victim",
                max_rows=5,
                statement_timeout_ms=2000,
                client_timeout=5,
            )
        finally:
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            await conn.close()

    with pytest.raises(ToolFailure) as caught:
        asyncio.run(stacked())
    assert caught.value.problem.metadata["sqlstate"] == "42601"
    assert "cannot insert multiple commands" in caught.value.problem.detail
    with postgres_server.connect() as conn:
        assert conn.execute("SELECT count(*) FROM victim").fetchone() == (3,)


@pytest.mark.postgres
def test_values_are_normalised_to_json(postgres_server: PostgresServer) -> None:
    text = """SELECT 1::int2 AS i2, 2::int4 AS i4, 9007199254740993::int8 AS i8,
        1.5::float8 AS f, 'NaN'::float8 AS nan, 'Infinity'::float4 AS inf,
        '-Infinity'::float8 AS ninf, 12.50::numeric AS num, 'NaN'::numeric AS nnum,
        true AS b, 'txt'::text AS s, '\\x00ff'::bytea AS bin,
        '2024-01-02'::date AS d, '10:11:12.5'::time AS tm, '10:11:12+02'::timetz AS tz,
        '2024-01-02 03:04:05.123456'::timestamp AS ts,
        '2024-01-02 03:04:05+00'::timestamptz AS tstz,
        'infinity'::timestamp AS ts_inf, '0044-03-15 10:00:00 BC'::timestamp AS ts_bc,
        '1 year 2 mons 3 days 04:05:06'::interval AS iv,
        '00000000-0000-0000-0000-000000000001'::uuid AS u, '192.168.0.1/24'::inet AS ip,
        '10.0.0.0/8'::cidr AS net, '08:00:2b:01:02:03'::macaddr AS mac,
        int4range(1, 10) AS r, ARRAY[1, 2, NULL] AS a,
        ARRAY[ARRAY['a', 'b'], ARRAY['c', 'd']] AS a2,
        '{"a": [1, 2.5, null], "b": {"c": "d"}}'::jsonb AS jb, '[1, 1e400]'::json AS j,
        ARRAY['{"x": 1}'::jsonb] AS ja, ARRAY['NaN'::float8, 1.5] AS fa,
        ARRAY['2024-01-02 03:04:05'::timestamp] AS tsa, ROW(1, 'a') AS rec,
        point(1, 2) AS p, NULL AS n"""
    result = query(reader_settings(postgres_server), text)
    assert result.truncated is False
    values = dict(zip(result.columns, result.rows[0], strict=True))
    assert values == {
        "i2": 1,
        "i4": 2,
        "i8": 9007199254740993,
        "f": 1.5,
        "nan": "NaN",
        "inf": "Infinity",
        "ninf": "-Infinity",
        "num": "12.50",
        "nnum": "NaN",
        "b": True,
        "s": "txt",
        "bin": "\\x00ff",
        "d": "2024-01-02",
        "tm": "10:11:12.5",
        "tz": "10:11:12+02:00",
        "ts": "2024-01-02T03:04:05.123456",
        "tstz": "2024-01-02T03:04:05+00:00",
        "ts_inf": "infinity",
        "ts_bc": "0044-03-15 10:00:00 BC",
        "iv": "P1Y2M3DT4H5M6S",
        "u": "00000000-0000-0000-0000-000000000001",
        "ip": "192.168.0.1/24",
        "net": "10.0.0.0/8",
        "mac": "08:00:2b:01:02:03",
        "r": "[1,10)",
        "a": [1, 2, None],
        "a2": [["a", "b"], ["c", "d"]],
        "jb": {"a": [1, 2.5, None], "b": {"c": "d"}},
        "j": [1, "1e400"],
        "ja": [{"x": 1}],
        "fa": ["NaN", 1.5],
        "tsa": ["2024-01-02T03:04:05"],
        "rec": "(1,a)",
        "p": "(1,2)",
        "n": None,
    }
    # The result is strict JSON end to end.
    ReadOnlySQLResult.model_validate_json(result.model_dump_json())


@pytest.mark.postgres
def test_a_first_row_larger_than_the_byte_bound_is_refused(postgres_server: PostgresServer) -> None:
    failure = query_failure(
        reader_settings(postgres_server, sql_max_result_bytes=65_536),
        "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 20000) AS g",
    )
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.metadata == {"row_bytes": 640_002, "max_result_bytes": 65_536}
    assert "65536 bytes MCP_SQL_MAX_RESULT_BYTES allows" in failure.problem.detail


@pytest.mark.postgres
@pytest.mark.parametrize("budget", [4096, 20_000, 1_048_576])
def test_rows_past_the_byte_bound_are_cut_at_a_row_boundary(
    postgres_server: PostgresServer, budget: int
) -> None:
    result = query(
        reader_settings(postgres_server, sql_max_result_bytes=budget),
        "SELECT g, repeat_free FROM generate_series(1, 60) AS g, "
        "LATERAL (SELECT string_agg(md5((g * k)::text), '') AS repeat_free "
        "FROM generate_series(1, 10) AS k) AS s",
    )
    # Each row's composite text is 2 + 1 or 2 digits + 320 characters.
    sizes = [len(f"({g},{value})") for g, value in result.rows]
    assert sum(sizes) <= budget
    if budget < 50 * 323:
        assert result.truncated_reason == "max_result_bytes"
        assert sum(sizes) + 324 > budget
    else:
        assert (result.row_count, result.truncated_reason) == (50, "max_rows")


@pytest.mark.postgres
def test_a_response_stays_within_four_times_the_byte_bound(postgres_server: PostgresServer) -> None:
    # Control characters grow most in JSON (\u0001, escaped once more in the text block).
    settings = reader_settings(postgres_server, sql_max_result_bytes=65_536)
    result = query(
        settings,
        "SELECT pg_catalog.string_agg(chr(1), '') FROM generate_series(1, 2000) "
        "CROSS JOIN generate_series(1, 40) AS rows(n) GROUP BY n",
    )
    text = result.model_dump_json()
    response = len(json.dumps({"text": text, "structured": json.loads(text)}, ensure_ascii=True))
    assert response <= 4 * 65_536
    assert result.truncated_reason == "max_result_bytes"
    assert 0 < result.row_count < 40


@pytest.mark.postgres
def test_deeply_nested_json_is_refused(postgres_server: PostgresServer) -> None:
    deep = "[" * 100 + "]" * 100
    failure = query_failure(reader_settings(postgres_server), f"SELECT '{deep}'::jsonb AS j")
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.metadata == {"max_json_depth": 64}
    # Brackets inside strings do not count.
    result = query(
        reader_settings(postgres_server), f"""SELECT '["{deep}", {{"k": [[1]]}}]'::jsonb AS j"""
    )
    assert result.rows[0][0] == [deep, {"k": [[1]]}]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("text", "code", "sqlstate"),
    [
        ("SELECT * FROM no_such_table", MCPErrorCode.VALIDATION_ERROR, "42P01"),
        ("SELECT no_such_column FROM t", MCPErrorCode.VALIDATION_ERROR, "42703"),
        ("SELECT * FROM private", MCPErrorCode.ACCESS_DENIED, "42501"),
        ("SELECT 1 / 0", MCPErrorCode.VALIDATION_ERROR, "22012"),
        ("SELECT (SELECT id FROM t)", MCPErrorCode.VALIDATION_ERROR, "21000"),
        ("SELECT t.leak FROM t LIMIT 1", MCPErrorCode.VALIDATION_ERROR, "42703"),
        ("SELECT 2147483647::int4 + 1", MCPErrorCode.VALIDATION_ERROR, "22003"),
    ],
)
def test_postgres_errors_are_mapped_in_band(
    postgres_server: PostgresServer, text: str, code: MCPErrorCode, sqlstate: str
) -> None:
    failure = query_failure(reader_settings(postgres_server), text)
    assert failure.problem.code is code
    assert failure.problem.metadata["sqlstate"] == sqlstate
    assert failure.problem.detail.startswith(f"PostgreSQL refused the query (SQLSTATE {sqlstate})")
    assert postgres_server.socket_dir.name not in failure.problem.detail


@pytest.mark.postgres
def test_a_view_calling_a_function_that_may_not_run_is_refused_before_it_runs(
    postgres_server: PostgresServer,
) -> None:
    # v_evil calls public.evil(), which the reader may not execute: PostgreSQL would refuse it
    # at run time (42501); the resolved tree names it first, and nothing runs.
    failure = query_failure(reader_settings(postgres_server), "SELECT * FROM v_evil")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith("The function public.evil() is not allowed")


@pytest.mark.postgres
def test_statement_timeout_is_an_execution_timeout(postgres_server: PostgresServer) -> None:
    started = time.monotonic()
    failure = query_failure(
        reader_settings(postgres_server, sql_query_timeout=0.5),
        "SELECT count(*) FROM generate_series(1, 10000000000)",
    )
    assert isinstance(failure, DeadlineExceeded)
    assert failure.problem.code is MCPErrorCode.EXECUTION_TIMEOUT
    assert failure.problem.metadata == {"sqlstate": "57014", "timeout_seconds": 0.5}
    assert time.monotonic() - started < 5


async def _active_queries(server: PostgresServer, application: str) -> int:
    async with await psycopg.AsyncConnection.connect(server.superuser_dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
            [application],
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


def _cancellable_reader(server: PostgresServer) -> tuple[str, Settings]:
    # One pooled connection and a statement timeout far beyond the test, so that only a
    # cancellation can end its slow query, under an application name of its own by which
    # the test finds that query's backend.
    application = f"mcp-cancel-{uuid.uuid4().hex[:8]}"
    settings = reader_settings(
        server, sql_pool_max_size=1, sql_query_timeout=60.0, sql_application_name=application
    )
    return application, settings


async def _until_idle(server: PostgresServer, application: str) -> int:
    for _ in range(50):
        if not await _active_queries(server, application):
            return 0
        await asyncio.sleep(0.05)
    return await _active_queries(server, application)


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["task.cancel", "deadline"])
def test_cancellation_cancels_the_server_query(postgres_server: PostgresServer, how: str) -> None:
    application, settings = _cancellable_reader(postgres_server)
    slow = ReadOnlySQLParams(query="SELECT count(*) FROM generate_series(1, 100000000000) AS g")
    checked(slow.query)  # The query passes the policy (a broken policy fails here, plainly).

    async def body(tool: SQLTool) -> ReadOnlySQLResult:
        if how == "task.cancel":
            task = asyncio.create_task(tool.run(slow))
            await asyncio.sleep(0.5)
            assert await _active_queries(postgres_server, application) == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await tool.run(slow)
        assert await _until_idle(postgres_server, application) == 0
        # The one pooled connection comes back clean and serves the next call.
        return await tool.run(ReadOnlySQLParams(query="SELECT 1 AS one"))

    result = run_with_tool(settings, body)
    assert result.rows == [[1]]


# A count of hours that keeps nothing (a set-returning function in the select list runs one
# row at a time, where one in FROM is stored first, in a temporary file once large), and that
# PostgreSQL plans as costly enough to JIT-compile where it can.
SLOW_COUNT = "SELECT count(*) FROM (SELECT generate_series(1, 100000000000) AS g) AS s"
# When the cancellation comes after the call starts: from before its pipeline is sent, through
# the statement's parsing and planning (where, on PostgreSQL 15 here, cancel requests sent
# 15 to 60 ms after the call started were dropped), into its execution.
CANCEL_OFFSETS_S = tuple(step * 0.004 for step in range(30))


@pytest.mark.postgres
def test_a_cancellation_stops_the_query_whenever_it_comes(
    postgres_server: PostgresServer,
) -> None:
    from mcp_server_suite.tools.sql.session import CANCEL_WAIT_S

    application, settings = _cancellable_reader(postgres_server)
    slow = ReadOnlySQLParams(query=SLOW_COUNT)
    checked(slow.query)

    async def body(tool: SQLTool) -> None:
        for offset in CANCEL_OFFSETS_S:
            task = asyncio.create_task(tool.run(slow))
            await asyncio.sleep(offset)
            task.cancel()
            cancelled = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The call ended by a cancel request PostgreSQL acted on, not by psycopg giving
            # the pipeline up after its wait and closing the connection.
            assert time.monotonic() - cancelled < CANCEL_WAIT_S, offset
            # The query stopped: a dropped cancel request would leave it running on to the
            # 60 s statement timeout.
            assert await _until_idle(postgres_server, application) == 0, offset

    run_with_tool(settings, body)


@pytest.mark.postgres
def test_a_pipeline_that_outlasts_the_cancel_wait_is_left_to_psycopg(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql import session

    # No time for the requests of this server: psycopg's own handling cancels the pipeline.
    monkeypatch.setattr(session, "CANCEL_WAIT_S", 0.0)
    application, settings = _cancellable_reader(postgres_server)
    slow = ReadOnlySQLParams(query=SLOW_COUNT)

    async def body(tool: SQLTool) -> ReadOnlySQLResult:
        task = asyncio.create_task(tool.run(slow))
        await asyncio.sleep(0.5)
        assert await _active_queries(postgres_server, application) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _until_idle(postgres_server, application) == 0
        return await tool.run(ReadOnlySQLParams(query="SELECT 2 AS two"))

    assert run_with_tool(settings, body).rows == [[2]]


# A client that sets the session's pins, starts the slow count and waits to be killed.
_ABANDONED_CLIENT = """
import sys, psycopg
from mcp_server_suite.tools.sql.session import SessionPins
conn = psycopg.connect(sys.argv[1], autocommit=True, application_name=sys.argv[2])
conn.execute(SessionPins(schemas=(), statement_timeout_ms=60_000).set_statements())
conn.execute(sys.argv[3])
"""


@pytest.mark.postgres
def test_a_session_whose_client_is_gone_ends_its_query(postgres_server: PostgresServer) -> None:
    application = f"mcp-gone-{uuid.uuid4().hex[:8]}"
    client = subprocess.Popen(  # This interpreter, with fixed arguments.
        [
            sys.executable,
            "-c",
            _ABANDONED_CLIENT,
            postgres_server.dsn(),
            application,
            SLOW_COUNT,
        ]
    )
    try:

        async def running() -> int:
            for _ in range(100):
                if await _active_queries(postgres_server, application):
                    break
                await asyncio.sleep(0.05)
            return await _active_queries(postgres_server, application)

        assert asyncio.run(running()) == 1
    finally:
        client.kill()
        client.wait()
    # Nothing reads or writes the connection while the count runs: only the session's periodic
    # check finds the client gone, well before the 60 s statement timeout.
    assert asyncio.run(_until_idle(postgres_server, application)) == 0


@pytest.mark.postgres
def test_the_client_timeout_backs_up_the_server_timeout(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import fetch_read_only
    from mcp_server_suite.tools.sql.values import make_adapters

    async def body() -> None:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.dsn(), autocommit=True, context=make_adapters()
        )
        try:
            with pytest.raises(DeadlineExceeded) as caught:
                await fetch_read_only(
                    conn,
                    "SELECT count(*) FROM generate_series(1, 100000000000) AS g",
                    max_rows=5,
                    statement_timeout_ms=60_000,
                    client_timeout=0.3,
                )
            assert caught.value.problem.metadata == {"timeout_seconds": 0.3}
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            cursor = await conn.execute("SELECT 1")
            assert await cursor.fetchone() == (1,)
        finally:
            await conn.close()

    asyncio.run(body())


@pytest.mark.postgres
def test_sessions_are_pinned_whatever_the_role_defaults(postgres_server: PostgresServer) -> None:
    role = "mcp_unpinned"
    with postgres_server.connect() as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(f"ALTER ROLE {role} SET standard_conforming_strings = off")
        conn.execute(f"ALTER ROLE {role} SET search_path = public, pg_catalog")
        conn.execute(f"ALTER ROLE {role} SET default_transaction_read_only = off")
        conn.execute(f"ALTER ROLE {role} SET DateStyle = 'SQL, DMY'")
    try:
        settings = reader_settings(postgres_server, sql_dsn=SecretStr(postgres_server.dsn(role)))
        result = query(
            settings,
            "SELECT current_setting('standard_conforming_strings') AS scs, "
            "current_setting('search_path') AS path, "
            "current_setting('default_transaction_read_only') AS ro, "
            "current_setting('client_encoding') AS enc, lower('ABC') AS lowered, "
            "'2024-01-02'::date AS d",
        )
        # Only trusted schemas: lower() is the built-in, not the fixture's public.lower.
        assert result.rows == [["on", "pg_catalog, pg_temp", "on", "UTF8", "abc", "2024-01-02"]]
    finally:
        with postgres_server.connect() as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_a_superuser_dsn_is_refused_in_band(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = reader_settings(
        postgres_server, sql_dsn=SecretStr(postgres_server.superuser_dsn), sql_connect_timeout=5.0
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        failure = query_failure(settings, "SELECT 1")
    # Told at once, not when the connect timeout ends.
    assert time.monotonic() - started < 4
    assert failure.problem.code is MCPErrorCode.INTERNAL_ERROR
    assert failure.problem.detail.startswith("MCP_SQL_DSN connects as a superuser")
    assert failure.problem.metadata["cause"] == "configuration"
    assert "read_only_sql: MCP_SQL_DSN connects as a superuser" in caplog.text


@pytest.mark.postgres
def test_an_unreachable_database_is_an_in_band_problem(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = f"postgresql://mcp_reader@/app?host={postgres_server.socket_dir}-missing"
    settings = reader_settings(postgres_server, sql_dsn=SecretStr(dsn), sql_connect_timeout=0.5)
    with caplog.at_level(logging.WARNING):
        failure = query_failure(settings, "SELECT 1")
    assert failure.problem.detail.startswith("PostgreSQL could not be reached")
    assert failure.problem.metadata == {"cause": "connection", "retryable": True}
    # The socket's path reaches stderr, for the operator, and never the caller.
    assert str(postgres_server.socket_dir) not in failure.problem.detail
    assert f"{postgres_server.socket_dir}-missing" in caplog.text


@pytest.mark.postgres
@pytest.mark.parametrize(("database", "sqlstate"), [("nosuchdb", "3D000"), ("app", "28P01")])
def test_a_refused_login_is_an_in_band_problem(
    postgres_server: PostgresServer, database: str, sqlstate: str
) -> None:
    dsn = postgres_server.dsn(PASSWORD_ROLE, password="wrong", database=database)  # noqa: S106  # Wrong on purpose.
    if database != "app":
        dsn = postgres_server.dsn(database=database)
    failure = query_failure(reader_settings(postgres_server, sql_dsn=SecretStr(dsn)), "SELECT 1")
    assert failure.problem.metadata == {"sqlstate": sqlstate, "cause": "configuration"}
    assert "MCP_SQL_DSN" in failure.problem.detail


@pytest.mark.postgres
def test_the_dsn_password_never_reaches_errors_or_logs(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Zq9-secret-" + uuid.uuid4().hex
    wrong = postgres_server.dsn(PASSWORD_ROLE, password=secret)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ToolFailure) as caught:
            query(
                reader_settings(postgres_server, sql_dsn=SecretStr(wrong), sql_connect_timeout=1.0),
                "SELECT 1",
            )
        # A DSN libpq cannot parse: its error would quote the password, so it is dropped.
        malformed = f"postgresql://{PASSWORD_ROLE}:{secret}%zz@/app?host=/nowhere"
        with pytest.raises(ToolFailure) as malformed_caught:
            query(reader_settings(postgres_server, sql_dsn=SecretStr(malformed)), "SELECT 1")
    # Nothing of libpq's parse error is kept, not even as the context.
    assert malformed_caught.value.__cause__ is None
    assert malformed_caught.value.__context__ is None
    for exc in (caught.value, malformed_caught.value):
        chain: BaseException | None = exc
        while chain is not None:
            assert secret not in str(chain)
            assert secret not in repr(chain)
            chain = chain.__cause__ or chain.__context__
    assert "password authentication failed" in caplog.text
    assert secret not in caplog.text
    # The right password works, so the failure above was the password and nothing else.
    good = postgres_server.dsn(PASSWORD_ROLE, password=PASSWORD_ROLE_SECRET)
    assert query(
        reader_settings(postgres_server, sql_dsn=SecretStr(good)), "SELECT 1 AS x"
    ).rows == [[1]]


@pytest.mark.postgres
def test_a_busy_pool_is_a_retryable_problem(postgres_server: PostgresServer) -> None:
    settings = reader_settings(
        postgres_server, sql_pool_max_size=1, sql_connect_timeout=0.3, sql_query_timeout=10.0
    )
    slow = ReadOnlySQLParams(query="SELECT count(*) FROM generate_series(1, 100000000000) AS g")
    checked(slow.query)  # The query passes the policy (a broken policy fails here, plainly).

    async def body(tool: SQLTool) -> ToolFailure:
        holder = asyncio.create_task(tool.run(slow))
        await asyncio.sleep(0.5)
        try:
            with pytest.raises(ToolFailure) as caught:
                await tool.run(ReadOnlySQLParams(query="SELECT 1"))
            return caught.value
        finally:
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder

    failure = run_with_tool(settings, body)
    assert failure.problem.code is MCPErrorCode.INTERNAL_ERROR
    assert failure.problem.metadata == {"retryable": True}


@pytest.mark.postgres
def test_session_state_never_survives_a_call(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import fetch_read_only

    # The policy refuses every way of creating this state, so it is created behind its back,
    # on the pool's one connection, and the next call must find none of it.
    settings = reader_settings(postgres_server, sql_pool_max_size=1)

    async def body(tool: SQLTool) -> list[list[Any]]:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        with postgres_server.connect() as superuser:
            # The role script revokes it; the state is created behind the policy's back.
            superuser.execute("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO mcp_reader")
        async with database._connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(42)")
            await conn.execute("PREPARE leftover AS SELECT 1")
            await conn.execute("LISTEN leftover")
            await conn.execute("BEGIN; DECLARE held CURSOR WITH HOLD FOR SELECT 1; COMMIT")
        async with database._connection() as conn:
            # pg_cursors lists the unnamed portal the statement runs in (the extended
            # protocol's portals are visible there); any other is left over.
            fetched = await fetch_read_only(
                conn,
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'),"
                " (SELECT count(*) FROM pg_prepared_statements"
                " WHERE name NOT IN ('mcp_guard', 'mcp_guard_unchanged', 'mcp_read_back')),"
                " (SELECT count(*) FROM pg_listening_channels()),"
                " (SELECT count(*) FROM pg_cursors WHERE name <> '')",
                max_rows=1,
                statement_timeout_ms=2000,
                client_timeout=5,
            )
            return fetched.rows

    try:
        assert run_with_tool(settings, body) == [[0, 0, 0, 0]]
    finally:
        with postgres_server.connect() as superuser:
            superuser.execute("REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint) FROM mcp_reader")


@pytest.mark.postgres
def test_a_connection_whose_pins_do_not_hold_is_closed(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable

    settings = reader_settings(postgres_server, sql_pool_max_size=1)

    async def body(tool: SQLTool) -> None:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        async with database._connection() as conn:
            await conn.execute("SET DateStyle = 'SQL, DMY'")
            with pytest.raises(DatabaseUnavailable):
                await database._run_on(conn, checked("SELECT 1"))
            assert conn.closed
        # The pool replaces the closed connection.
        result = await tool.run(ReadOnlySQLParams(query="SELECT 2 AS two"))
        assert result.rows == [[2]]

    run_with_tool(settings, body)


@pytest.mark.postgres
def test_a_reset_that_finds_broken_pins_discards_the_connection(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = reader_settings(postgres_server, sql_pool_max_size=1)

    async def body(tool: SQLTool) -> int:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        async with database._connection() as conn:
            first = conn.pgconn.backend_pid
            await conn.execute("SET standard_conforming_strings = off")
        async with database._connection() as conn:
            return first - conn.pgconn.backend_pid

    with caplog.at_level(logging.WARNING, logger="mcp_server_suite.tools.sql.session"):
        assert run_with_tool(settings, body) != 0
    assert "could not be reset: the session's pinned settings did not hold" in caplog.text


@pytest.mark.postgres
def test_a_connection_goes_back_to_the_pool_idle_or_closed(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql.session import ReadOnlyDatabase

    settings = reader_settings(postgres_server, sql_pool_max_size=1)

    async def body(tool: SQLTool) -> list[Any]:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        seen: list[Any] = []
        # Left inside a transaction: rolled back, then reset, and used again.
        async with database._connection() as conn:
            first = conn.pgconn.backend_pid
            await conn.execute("BEGIN READ ONLY")
        async with database._connection() as conn:
            seen.append(conn.pgconn.backend_pid == first)
            seen.append(conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE)
            await conn.close()
        # Closed by its user: replaced by the pool.
        seen.append((await tool.run(ReadOnlySQLParams(query="SELECT 2"))).rows)

        # Cancelled while it is reset: closed at once, and the cancellation goes on.
        async def cancelled(self: ReadOnlyDatabase, conn: Any) -> None:
            raise asyncio.CancelledError

        with monkeypatch.context() as patch:
            patch.setattr(ReadOnlyDatabase, "_reset", cancelled)
            with pytest.raises(asyncio.CancelledError):
                async with database._connection() as conn:
                    held = conn
        seen.append(held.closed)
        seen.append((await tool.run(ReadOnlySQLParams(query="SELECT 3"))).rows)
        return seen

    assert run_with_tool(settings, body) == [True, True, [[2]], True, [[3]]]


@pytest.mark.postgres
def test_recovery_closes_a_connection_it_cannot_roll_back(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import _recover
    from mcp_server_suite.tools.sql.values import make_adapters

    async def body() -> None:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.dsn(), autocommit=True, context=make_adapters()
        )
        await conn.execute("BEGIN READ ONLY")
        with postgres_server.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [conn.pgconn.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            await _recover(conn)
        assert conn.closed
        await _recover(conn)  # Already closed: nothing to do, nothing raised.
        await conn.close()

    asyncio.run(body())


@pytest.mark.postgres
def test_a_session_ended_mid_query_is_an_in_band_problem(
    postgres_server: PostgresServer,
) -> None:
    application = f"mcp-kill-{uuid.uuid4().hex[:8]}"
    settings = reader_settings(
        postgres_server, sql_query_timeout=30.0, sql_application_name=application
    )

    slow = SLOW_COUNT
    checked(slow)  # The query passes the policy (a broken policy fails here, plainly).

    async def body(tool: SQLTool) -> None:
        task = asyncio.create_task(tool.run(ReadOnlySQLParams(query=slow)))
        await asyncio.sleep(0.5)
        with postgres_server.connect() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND state = 'active'",
                [application],
            )
        with pytest.raises(ToolFailure) as caught:
            await task
        # The query had run: it is not sent again, and the caller is told it may retry.
        metadata = dict(caught.value.problem.metadata)
        # libpq reports the end of the connection, or PostgreSQL's 57P01 first.
        assert metadata.pop("sqlstate", "57P01") == "57P01"
        assert metadata == {"cause": "connection", "retryable": True}

    run_with_tool(settings, body)


def test_translation_table_withholds_host_paths() -> None:
    from mcp_server_suite.tools.sql.conditions import echoable
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, translate_database_error

    assert echoable('could not open file "/etc/passwd" for reading') == "(message withheld)"
    assert echoable("could not stat file /var/lib/x") == "(message withheld)"
    assert echoable(None) == "(message withheld)"
    assert echoable("operator does not exist: integer / text") == (
        "'operator does not exist: integer / text'"
    )
    assert echoable('invalid input syntax for type date: "2020/01/02"').startswith("'invalid")
    # A connection libpq lost is the connection's condition, told in-band; only a misuse of
    # psycopg by this server is an internal error.
    lost = translate_database_error(psycopg.OperationalError("server closed"), 1000)
    assert isinstance(lost, ToolFailure)
    assert lost.problem.metadata == {"cause": "connection", "retryable": True}
    misuse = translate_database_error(psycopg.ProgrammingError("misuse"), 1000)
    assert isinstance(misuse, DatabaseUnavailable)
    lock = translate_database_error(psycopg.errors.LockNotAvailable(), 1000)
    assert isinstance(lock, ToolFailure)
    assert lock.problem.code is MCPErrorCode.EXECUTION_TIMEOUT


def test_read_back_must_be_one_complete_row() -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, SessionPins

    pins = SessionPins(schemas=("ext",), statement_timeout_ms=1000)
    for row in (None, ("on", "UTF8")):
        with pytest.raises(DatabaseUnavailable):
            pins.ensure_read_back(row)
    good = (
        "on",
        "UTF8",
        "pg_catalog, ext, pg_temp",
        "on",
        "ISO, YMD",
        "iso_8601",
        "hex",
        "off",
        "1s",
        "1s",
        "15s",
        0,
        0,
        "",
    )
    pins.ensure_read_back(good)
    # A superuser is the configuration's condition, refused in-band.
    with pytest.raises(ToolFailure, match="superuser"):
        pins.ensure_read_back((*good[:7], "on", *good[8:]))
    for bad in (
        (*good[:2], "pg_catalog, public", *good[3:]),
        (*good[:2], "pg_temp, pg_catalog, ext", *good[3:]),
        (*good[:8], "0", *good[9:]),
        (*good[:9], "2s", *good[10:]),
        (*good[:10], "0", *good[11:]),
        (*good[:11], 1, 0, ""),
        (*good[:12], 1, ""),
        good[:13],
    ):
        with pytest.raises(DatabaseUnavailable):
            pins.ensure_read_back(bad)


_TIME_UNITS_MS = (1, 1_000, 60_000, 3_600_000, 86_400_000)


@pytest.mark.postgres
@given(
    value=st.one_of(
        st.integers(0, 2**31 - 1),
        st.builds(operator.mul, st.integers(0, 24), st.sampled_from(_TIME_UNITS_MS)),
    )
)
def test_milliseconds_are_read_back_as_postgresql_shows_them(
    postgres_server: PostgresServer, value: int
) -> None:
    from mcp_server_suite.tools.sql.session import shown_milliseconds

    # The read-back compares the session's timeouts as text, so the text must be PostgreSQL's.
    with postgres_server.connect() as conn:
        conn.execute(f"SET statement_timeout = {value}")
        shown = conn.execute("SELECT current_setting('statement_timeout')").fetchone()
    assert shown == (shown_milliseconds(value),)


@pytest.mark.postgres
def test_a_call_is_one_round_trip_and_a_failed_one_two(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql import session

    trips: list[list[Any]] = []
    original = session._round_trip

    async def counting(conn: Any, statements: Any, **kwargs: Any) -> Any:
        trips.append(list(statements))
        return await original(conn, statements, **kwargs)

    monkeypatch.setattr(session, "_round_trip", counting)

    async def body(tool: SQLTool) -> list[list[list[Any]]]:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        calls = []
        for text in ("SELECT 2", "SELECT 1 / 0", "SELECT 3"):
            trips.clear()
            with contextlib.suppress(ToolFailure):
                await tool.run(ReadOnlySQLParams(query=text))
            calls.append(list(trips))
        return calls

    settings = reader_settings(postgres_server, sql_pool_max_size=1)
    ok, failed, again = run_with_tool(settings, body)
    read_back = session._Prepared(b"mcp_read_back")
    assert len(ok) == 1
    assert ok[0][0] == b"BEGIN TRANSACTION READ ONLY"
    assert ok[0][-2:] == [b"ROLLBACK", read_back]
    # The failed statement skipped the rest of its pipeline; a second round trip ends its
    # transaction and reads the pins back.
    assert len(failed) == 2
    assert failed[1] == [b"ROLLBACK", read_back]
    assert len(again) == 1


@pytest.mark.postgres
def test_no_call_sets_its_own_timeout(postgres_server: PostgresServer) -> None:
    # The session's statement_timeout is pinned when it is set up and read back after every
    # call, so a call's read segment is BEGIN, the guard and the statement alone.
    marker = f"timeout-{uuid.uuid4().hex}"
    logged_before = len(postgres_server.log_text())
    result = query(
        reader_settings(postgres_server, sql_query_timeout=1.5),
        f"SELECT '{marker}' AS m, current_setting('statement_timeout') AS t",
    )
    assert result.rows == [[marker, "1500ms"]]
    logged = postgres_server.log_text()[logged_before:]
    assert marker in logged
    assert "SET LOCAL" not in logged


@pytest.mark.postgres
def test_long_queries_are_checked_off_the_event_loop(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.tool import INLINE_POLICY_CHARS

    columns = ", ".join(f"id + {i} AS c{i}" for i in range(400))
    text = f"SELECT {columns} FROM t ORDER BY id"
    assert len(text) > INLINE_POLICY_CHARS

    async def body(tool: SQLTool) -> ReadOnlySQLResult:
        result = await tool.run(ReadOnlySQLParams(query=text, max_rows=2))
        await tool.aclose()
        await tool.aclose()  # Closing twice is harmless.
        return result

    result = run_with_tool(reader_settings(postgres_server), body)
    assert (result.row_count, result.truncated, len(result.columns)) == (2, True, 400)


@pytest.mark.postgres
def test_recovering_an_idle_connection_changes_nothing(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import _recover

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(
            postgres_server.dsn(), autocommit=True
        ) as conn:
            await _recover(conn)
            assert not conn.closed
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE

    asyncio.run(body())


@pytest.mark.postgres
def test_policy_answers_are_cached_per_query_and_cap(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql import tool as sql

    monkeypatch.setattr(sql, "POLICY_CACHE_ENTRIES", 2)
    checks: list[str] = []
    original = sql.check_untrusted_sql

    def counting(text: str, **kwargs: Any) -> CheckedTree:
        checks.append(text)
        return original(text, **kwargs)

    monkeypatch.setattr(sql, "check_untrusted_sql", counting)

    async def body(tool: SQLTool) -> list[Any]:
        values = []
        for text, rows in [
            ("SELECT 1 AS a", 50),
            ("SELECT 1 AS a", 50),  # The same call: its statement is kept.
            ("SELECT 1 AS a", 5),  # The same shape: built from the shape's statement.
            ("SELECT 2 AS b", 50),  # Evicts ("SELECT 1 AS a", 50) from the statements.
            ("SELECT 1 AS a", 50),  # Its shape is still kept, and is now the newest.
            ("SELECT 3 AS c", 50),  # Evicts the shape of "SELECT 2 AS b".
            ("SELECT 9 AS a", 50),
            ("SELECT 7 AS b", 50),
        ]:
            result = await tool.run(ReadOnlySQLParams(query=text, max_rows=rows))
            values.append(result.rows[0][0])
        return values

    assert run_with_tool(reader_settings(postgres_server), body) == [1, 1, 1, 2, 1, 3, 9, 7]
    assert checks == ["SELECT 1 AS a", "SELECT 2 AS b", "SELECT 3 AS c", "SELECT 7 AS b"]


# --- One round trip ----------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_call_that_leaves_state_closes_its_connection(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, SessionPins

    # The policy refuses PREPARE, and a prepared statement survives the rollback; the
    # statement is built by hand to get past the policy, as a policy defect would. The call's
    # own read-back finds it, and the connection is closed (which drops it) instead of going
    # back to the pool; a call that ends clean never needs the pool's reset.
    resets: list[int] = []
    original = SessionPins.reset_statements

    def counting() -> Any:
        resets.append(1)
        return original()

    monkeypatch.setattr(SessionPins, "reset_statements", staticmethod(counting))
    settings = reader_settings(postgres_server, sql_pool_max_size=1)
    preparing = ExecutableStatement(
        "PREPARE leftover AS SELECT 1", max_rows=1, max_result_bytes=0, wrapped=False
    )

    async def body(tool: SQLTool) -> list[list[Any]]:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        async with database._connection() as conn:
            with pytest.raises(DatabaseUnavailable, match="prepared statement"):
                await database._run_on(conn, preparing)
            assert conn.closed
        resets.clear()
        return (await tool.run(ReadOnlySQLParams(query="SELECT 2"))).rows

    assert run_with_tool(settings, body) == [[2]]
    assert resets == []


@pytest.mark.postgres
def test_a_call_never_passes_on_an_advisory_lock(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql.session import SessionPins

    # A session-level advisory lock survives the rollback. The policy refuses every function
    # that takes one, so the statement is built by hand, as a policy defect would; the call's
    # own read-back releases the lock, and the connection goes back to the pool without the
    # pool's reset.
    resets: list[int] = []
    original = SessionPins.reset_statements

    def counting() -> Any:
        resets.append(1)
        return original()

    monkeypatch.setattr(SessionPins, "reset_statements", staticmethod(counting))
    settings = reader_settings(postgres_server, sql_pool_max_size=1)
    locking = ExecutableStatement(
        "SELECT pg_advisory_lock(4712) AS locked", max_rows=1, max_result_bytes=0, wrapped=False
    )
    with postgres_server.connect() as superuser:
        superuser.execute("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO mcp_reader")

    async def body(tool: SQLTool) -> tuple[list[list[Any]], int, bool]:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        resets.clear()
        async with database._connection() as conn:
            fetched = await database._run_on(conn, locking)
            closed = conn.closed
        return fetched.rows, database_state(postgres_server).advisory_locks, closed

    try:
        assert run_with_tool(settings, body) == ([[""]], 0, False)
    finally:
        with postgres_server.connect() as superuser:
            superuser.execute("REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint) FROM mcp_reader")
    assert resets == []


@pytest.mark.postgres
def test_a_cancelled_call_leaves_the_reset_to_the_pool(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server_suite.tools.sql.session import SessionPins

    resets: list[int] = []
    original = SessionPins.reset_statements

    def counting() -> Any:
        resets.append(1)
        return original()

    monkeypatch.setattr(SessionPins, "reset_statements", staticmethod(counting))
    settings = reader_settings(postgres_server, sql_pool_max_size=1, sql_query_timeout=10.0)
    slow = ReadOnlySQLParams(query="SELECT count(*) FROM generate_series(1, 100000000000) AS g")

    async def body(tool: SQLTool) -> ReadOnlySQLResult:
        # The first call reads the relation catalog on a connection of its own use, which the
        # pool resets; what is counted is the resets after it.
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        resets.clear()
        task = asyncio.create_task(tool.run(slow))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The same (only) connection serves the next call, reset by the pool.
        return await tool.run(ReadOnlySQLParams(query="SELECT 3 AS three"))

    assert run_with_tool(settings, body).rows == [[3]]
    assert resets == [1]


@pytest.mark.postgres
@pytest.mark.parametrize("text", ["SELECT 1", "SELECT 1 / 0"])
def test_a_read_back_that_fails_after_the_query_closes_the_connection(
    postgres_server: PostgresServer, text: str
) -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable

    settings = reader_settings(postgres_server, sql_pool_max_size=1)

    async def body(tool: SQLTool) -> None:
        await tool.run(ReadOnlySQLParams(query="SELECT 1"))
        database = tool._database
        assert database is not None
        async with database._connection() as conn:
            # bytea_output is not among the settings PostgreSQL reports on its own, so only
            # the read-back at the end of the call can see it changed: in the call's own
            # round trip, or in the second one that ends a failed query's transaction.
            await conn.execute("SET bytea_output = 'escape'")
            with pytest.raises(DatabaseUnavailable, match="pinned settings did not hold"):
                await database._run_on(conn, checked(text))
            assert conn.closed
        result = await tool.run(ReadOnlySQLParams(query="SELECT '\\x01'::bytea AS b"))
        assert result.rows == [["\\x01"]]

    run_with_tool(settings, body)


@pytest.mark.postgres
def test_an_error_of_any_class_is_in_band_and_the_session_stays_usable(
    postgres_server: PostgresServer,
) -> None:
    from mcp_server_suite.tools.sql.session import fetch_read_only
    from mcp_server_suite.tools.sql.values import make_adapters

    async def body() -> None:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.superuser_dsn, autocommit=True, context=make_adapters()
        )
        try:
            # 55000 (object_not_in_prerequisite_state), a class the old table left out.
            with pytest.raises(ToolFailure, match="SQLSTATE 55000") as caught:
                await fetch_read_only(
                    conn,
                    "SELECT currval('s')",
                    max_rows=1,
                    statement_timeout_ms=2000,
                    client_timeout=5,
                )
            assert isinstance(caught.value.__cause__, psycopg.errors.ObjectNotInPrerequisiteState)
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            again = await fetch_read_only(
                conn, "SELECT 1 AS one", max_rows=1, statement_timeout_ms=2000, client_timeout=5
            )
            assert again.rows == [[1]]
        finally:
            await conn.close()

    asyncio.run(body())


class _Result:
    # A stand-in for libpq's PGresult: its status is all the pipeline reads.
    def __init__(self, status: psycopg.pq.ExecStatus) -> None:
        self.status = status


class _ScriptedConnection:
    # A stand-in for libpq's PGconn in pipeline mode, replaying scripted replies.
    def __init__(self, flushes: list[int], busy: list[bool], results: list[Any]) -> None:
        self.flushes = flushes
        self.busy = busy
        self.results = results
        self.sent: list[Any] = []
        self.consumed = 0
        self.in_pipeline = False

    def enter_pipeline_mode(self) -> None:
        self.in_pipeline = True

    def exit_pipeline_mode(self) -> None:
        self.in_pipeline = False

    def send_query_params(self, statement: bytes, params: None) -> None:
        self.sent.append(statement)

    def send_query_prepared(self, name: bytes, params: list[bytes] | None) -> None:
        self.sent.append((name, params))

    def pipeline_sync(self) -> None:
        self.sent.append(None)

    def flush(self) -> int:
        return self.flushes.pop(0) if self.flushes else 0

    def consume_input(self) -> None:
        self.consumed += 1

    def is_busy(self) -> bool:
        return self.busy.pop(0) if self.busy else False

    def get_result(self) -> Any:
        return self.results.pop(0)


def _drive(generator: Any, replies: list[Any]) -> Any:
    # Runs a psycopg generator to its end, answering each wait with the next reply.
    waits = []
    try:
        waits.append(next(generator))
        while True:
            waits.append(generator.send(replies.pop(0) if replies else 0))
    except StopIteration as stop:
        return waits, stop.value


OK = psycopg.pq.ExecStatus.COMMAND_OK
SYNC = psycopg.pq.ExecStatus.PIPELINE_SYNC


def test_the_pipeline_sends_every_statement_then_one_sync() -> None:
    from psycopg.waiting import Ready, Wait

    from mcp_server_suite.tools.sql.session import _pipeline, _Prepared

    first, second, third = _Result(OK), _Result(OK), _Result(OK)
    conn = _ScriptedConnection(
        # The output goes out in three writes; the server answers while it is written.
        flushes=[1, 1, 0],
        # The first result is not there yet on the first look, nor after a wake-up with
        # nothing to read (as psycopg resumes a generator after a cancellation).
        busy=[True, True, False],
        results=[first, None, second, None, third, None, _Result(SYNC)],
    )
    waits, results = _drive(
        _pipeline(
            conn,  # type: ignore[arg-type]  # A stand-in.
            [b"A", _Prepared(b"guard", (b"1:1:",)), _Prepared(b"read_back")],
            [],
        ),
        [Ready.R, None, Ready.NONE, Ready.R],
    )
    # Prepared statements run by name, with their parameters (none: no parameter list).
    assert conn.sent == [b"A", (b"guard", (b"1:1:",)), (b"read_back", None), None]
    assert waits == [Wait.RW, Wait.RW, Wait.R, Wait.R]
    assert conn.consumed == 2
    assert results == [first, second, third]
    assert not conn.in_pipeline


@pytest.mark.parametrize(
    "results",
    [
        [None],  # No result for a statement.
        [_Result(OK), _Result(OK)],  # Two results for one statement.
        [_Result(OK), None, None],  # No Sync after the statements.
        [_Result(OK), None, _Result(OK)],  # A result where the Sync belongs.
    ],
)
def test_a_pipeline_out_of_step_is_an_internal_error(results: list[Any]) -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, _pipeline

    conn = _ScriptedConnection(flushes=[], busy=[], results=results)
    with pytest.raises(DatabaseUnavailable, match="did not match"):
        _drive(_pipeline(conn, [b"A"], []), [])  # type: ignore[arg-type]  # A stand-in.
    # The connection stays in pipeline mode, which `_recover()` answers by closing it.
    assert conn.in_pipeline


def test_a_cleanup_statement_that_did_not_run_fails_the_check() -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, _ensure_completed

    tuples = _Result(psycopg.pq.ExecStatus.TUPLES_OK)
    _ensure_completed([_Result(OK), tuples])  # type: ignore[list-item]  # Stand-ins.
    with pytest.raises(DatabaseUnavailable, match="PIPELINE_ABORTED"):
        _ensure_completed(
            [_Result(OK), _Result(psycopg.pq.ExecStatus.PIPELINE_ABORTED)]  # type: ignore[list-item]  # Stand-ins.
        )


@pytest.mark.postgres
def test_a_first_row_past_the_response_bound_is_refused(postgres_server: PostgresServer) -> None:
    # 4,000 astral characters are 16,000 bytes (within the bound) but 96,000 characters of
    # response, more than four times 16,384.
    failure = query_failure(
        reader_settings(postgres_server, sql_max_result_bytes=16_384),
        "SELECT string_agg(chr(128512), '') FROM generate_series(1, 4000)",
    )
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.metadata == {"max_result_bytes": 16_384}


@pytest.mark.postgres
def test_explain_runs_in_the_read_only_transaction(postgres_server: PostgresServer) -> None:
    settings = reader_settings(postgres_server)
    text = query(settings, "EXPLAIN SELECT * FROM t WHERE id = 1")
    assert text.columns == ["QUERY PLAN"]
    assert any("Scan" in str(row[0]) for row in text.rows)
    plan = query(settings, "EXPLAIN (FORMAT JSON, COSTS FALSE) SELECT * FROM t")
    assert plan.row_count == 1
    document: Any = plan.rows[0][0]
    assert document[0]["Plan"]["Relation Name"] == "t"
    assert "Total Cost" not in document[0]["Plan"]
    assert query(settings, "EXPLAIN SELECT * FROM t", max_rows=1).truncated_reason in (
        None,
        "max_rows",
    )


@pytest.mark.postgres
def test_a_connection_never_set_up_is_never_used(postgres_server: PostgresServer) -> None:
    from mcp_server_suite.tools.sql.session import DatabaseUnavailable, ReadOnlyDatabase
    from mcp_server_suite.tools.sql.tool import trusted_code
    from mcp_server_suite.tools.sql.values import make_adapters

    settings = reader_settings(postgres_server)
    database = ReadOnlyDatabase(
        postgres_server.dsn(),
        trusted=trusted_code(settings),
        statement_timeout_ms=1000,
        application_name="t",
        connect_timeout=2,
        query_timeout=1,
        pool_max_size=1,
    )

    async def body() -> None:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.dsn(), autocommit=True, context=make_adapters()
        )
        try:
            with pytest.raises(DatabaseUnavailable):
                await database._reset(conn)
            with pytest.raises(DatabaseUnavailable):
                await database._run_on(conn, checked("SELECT 1"))
            assert conn.closed
        finally:
            await conn.close()

    asyncio.run(body())


def test_a_guard_refusal_without_an_audit_finding_says_what_to_do() -> None:
    from mcp_server_suite.tools.sql.session import _GuardFailed, _rows_or_raise

    with pytest.raises(ToolFailure) as caught:
        _rows_or_raise(_GuardFailed())
    assert "retry" in caught.value.problem.detail
    assert caught.value.problem.code is MCPErrorCode.ACCESS_DENIED


def test_the_schema_tool_closes_the_shared_pool() -> None:
    from mcp_server_suite.tools.sql import build_sql_tools

    specs = build_sql_tools(Settings(sql_dsn=SecretStr("postgresql://u@/db?host=/nonexistent")))
    close = specs["sql_schema"].close
    assert close is not None
    asyncio.run(close())
