"""User types of MCP_SQL_SCHEMAS named as relations are: unqualified, qualified from the catalog.

Issue 19, item 7: `'PG-13'::mpaa_rating`, `enum_range(NULL::mpaa_rating)`, `CAST('2006' AS
year)` failed with 42704, since the session's search_path holds trusted schemas only. An
unqualified type name is now looked up in pg_catalog, the trusted extensions' schemas and
MCP_SQL_SCHEMAS, in that order, and the statement that runs names the schema found
(`statement.py`, Rule 1); what the type runs is still checked as PostgreSQL resolves it.
The database is `tests/vectors/sql_types_fixture.sql`, loaded into the suite's server.
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql import session as sql_session
from mcp_server_suite.tools.sql import statement, verifier
from mcp_server_suite.tools.sql.policy import FunctionPolicy, parse_tree_text
from mcp_server_suite.tools.sql.statement import (
    PolicyDefect,
    RelationCatalog,
    render_same_shape,
    render_statement,
)
from mcp_server_suite.tools.sql.tool import SQLTool, check_untrusted_sql
from tests.support.postgres import PostgresServer, reader_settings
from tests.unit.test_sql_tool import query, query_failure

_FIXTURE: Final = Path(__file__).parents[1] / "vectors" / "sql_types_fixture.sql"
_DATABASE: Final = "types"
_SCHEMAS: Final = ("pagila", "pagila2")

# The catalog of the tests that need no server: the fixture's names, as the server reads them.
_CATALOG: Final = RelationCatalog(
    _SCHEMAS,
    [("pagila", "film"), ("pagila", "film_list"), ("pagila", "shared"), ("pagila2", "shared")],
    [
        ("pg_catalog", "text"),
        ("pg_catalog", "int4"),
        ("pg_catalog", "citext_like"),
        ("pagila", "mpaa_rating"),
        ("pagila", "year"),
        ("pagila", "pair"),
        ("pagila", "text"),
        ("pagila", "int4"),
        ("pagila", 'Odd "name"'),
        ("pagila2", "mpaa_rating"),
        ("pagila2", "only_here"),
        ("ext", "cube_like"),
        ("pagila2", "cube_like"),
    ],
    extension_schemas=("ext",),
)


def _render(text: str, catalog: RelationCatalog = _CATALOG) -> statement.ExecutableStatement:
    checked = check_untrusted_sql(text, functions=FunctionPolicy(), schemas=_SCHEMAS)
    return render_statement(checked, catalog, max_rows=50, max_result_bytes=65_536)


# --- Without a server: what is qualified, and the proof -----------------------------------


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("SELECT 'PG-13'::mpaa_rating", "SELECT 'PG-13'::\"pagila\".mpaa_rating"),
        ("SELECT mpaa_rating 'R'", "SELECT \"pagila\".mpaa_rating 'R'"),
        ("SELECT CAST('2006' AS year)", "SELECT CAST('2006' AS \"pagila\".year)"),
        ("SELECT NULL::mpaa_rating[]", 'SELECT NULL::"pagila".mpaa_rating[]'),
        ("SELECT NULL::mpaa_rating ARRAY[2]", 'SELECT NULL::"pagila".mpaa_rating ARRAY[2]'),
        ("SELECT 'b'::only_here", "SELECT 'b'::\"pagila2\".only_here"),
        (
            "SELECT * FROM json_to_record('{}') AS t(r mpaa_rating, y year)",
            'SELECT * FROM json_to_record(\'{}\') AS t(r "pagila".mpaa_rating, y "pagila".year)',
        ),
        ('SELECT \'x\'::"Odd ""name"""', 'SELECT \'x\'::"pagila"."Odd ""name"""'),
        (
            "SELECT JSON_VALUE('1', '$' RETURNING year)",
            "SELECT JSON_VALUE('1', '$' RETURNING \"pagila\".year)",
        ),
        (
            "SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (a year PATH '$')) AS j",
            "SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (a \"pagila\".year PATH '$')) AS j",
        ),
        # Built-in names, a user type of the same name notwithstanding, and an extension's.
        ("SELECT 'a'::text, 1::int4, 2::int", "SELECT 'a'::text, 1::int4, 2::int"),
        ("SELECT 'a'::cube_like", "SELECT 'a'::cube_like"),
        # Already qualified, or found nowhere: left as written.
        ("SELECT 'X'::pagila2.mpaa_rating", "SELECT 'X'::pagila2.mpaa_rating"),
        ("SELECT 's'::secret", "SELECT 's'::secret"),
    ],
)
def test_unqualified_types_are_qualified_with_the_first_schema_that_holds_them(
    text: str, runs: str
) -> None:
    assert _render(text).query == runs


def test_each_use_of_a_name_is_qualified_and_relations_keep_their_own_names() -> None:
    built = _render(
        "SELECT f.title, 'G'::mpaa_rating, NULL::mpaa_rating FROM film AS f, shared "
        "WHERE f.rating = ANY ('{G,R}'::mpaa_rating[])"
    )
    assert built.query == (
        'SELECT f.title, \'G\'::"pagila".mpaa_rating, NULL::"pagila".mpaa_rating '
        'FROM "pagila".film AS f, "pagila".shared '
        "WHERE f.rating = ANY ('{G,R}'::\"pagila\".mpaa_rating[])"
    )
    assert dict(built.qualified_types) == {"mpaa_rating": "pagila"}


def test_the_order_of_mcp_sql_schemas_decides_types_as_it_does_relations() -> None:
    reversed_catalog = RelationCatalog(
        ("pagila2", "pagila"),
        [("pagila", "shared"), ("pagila2", "shared")],
        [("pagila", "mpaa_rating"), ("pagila2", "mpaa_rating")],
    )
    built = _render("SELECT 'X'::mpaa_rating FROM shared", reversed_catalog)
    assert built.query == 'SELECT \'X\'::"pagila2".mpaa_rating FROM "pagila2".shared'


def test_an_explain_is_qualified_and_proved_too() -> None:
    built = _render("EXPLAIN SELECT enum_range(NULL::mpaa_rating)")
    assert built.sql.endswith('SELECT enum_range(NULL::"pagila".mpaa_rating)')


def test_a_text_that_is_not_the_checked_tree_is_a_defect(monkeypatch: pytest.MonkeyPatch) -> None:
    # The proof covers type names: a schema written elsewhere, or not at all, is refused.
    original = statement._insertions

    def moved(*args: Any) -> list[tuple[int, str]]:
        return [(offset, "pagila2") for offset, _ in original(*args)]

    monkeypatch.setattr(statement, "_insertions", moved)
    with pytest.raises(PolicyDefect):
        _render("SELECT 'G'::mpaa_rating")
    monkeypatch.setattr(statement, "_insertions", lambda *args: [])
    with pytest.raises(PolicyDefect):
        _render("SELECT 'G'::mpaa_rating")


def test_a_type_name_whose_modifiers_are_not_json_is_a_defect() -> None:
    text = "SELECT x::mpaa_rating(1) FROM film"
    like = _render(text)
    tree = parse_tree_text(text).replace('"typmods":[', '"typmods":x[')
    with pytest.raises(PolicyDefect, match="malformed"):
        render_same_shape(text, tree, like, max_rows=5, max_result_bytes=65_536)


def _missing(sqlstate: str, message: str) -> ToolFailure:
    return ToolFailure(
        f"PostgreSQL refused the query (SQLSTATE {sqlstate}): {message}",
        code=MCPErrorCode.VALIDATION_ERROR,
        metadata={"sqlstate": sqlstate},
    )


@pytest.mark.parametrize(
    ("sqlstate", "message", "text", "names", "told"),
    [
        # A name that needs quotes is written with them.
        (
            "42P01",
            'relation "Film List" does not exist',
            "SELECT 'Film List'::regclass",
            RelationCatalog(("pagila",), [("pagila", "Film List")]),
            "('pagila.\"Film List\"')",
        ),
        # Without a catalog (a generation of another kind), nothing is claimed about schemas.
        (
            "42704",
            'type "mood" does not exist',
            "SELECT 'a'::mood",
            None,
            "MCP_SQL_SCHEMAS (none)",
        ),
        (
            "42704",
            'type "mood" does not exist',
            "SELECT 'mood'::regtype",
            None,
            "named in a string is in none of",
        ),
    ],
)
def test_the_hint_for_a_name_not_found_fits_the_name(
    sqlstate: str, message: str, text: str, names: RelationCatalog | None, told: str
) -> None:
    hinted = verifier._name_in_a_string(_missing(sqlstate, message), text, names)
    assert hinted is not None
    assert told in hinted.problem.detail


def test_other_missing_objects_keep_the_servers_message() -> None:
    for sqlstate, message, text in [
        ("42703", 'column "x" does not exist', "SELECT x"),
        ("42704", 'collation "x" does not exist', "SELECT 'a' COLLATE x"),
        ("42P01", 'relation "t" does not exist', "SELECT * FROM t"),
        ("42704", 'type "public.nosuch" does not exist', "SELECT 'a'::public.nosuch"),
    ]:
        assert verifier._name_in_a_string(_missing(sqlstate, message), text, _CATALOG) is None


# Queries of one shape, with constants of their kinds, to hold the cached path to the full one.
_TEMPLATES: Final = [
    "SELECT {s}::mpaa_rating, {s}::year FROM film WHERE film_id = {n}",
    "SELECT mpaa_rating {s}, NULL::mpaa_rating[], {n}::text",
    "SELECT CAST({s} AS only_here), x::mpaa_rating(1) FROM (VALUES ({s})) AS v(x)",
    "SELECT * FROM json_to_record({s}) AS t(r mpaa_rating, y year) WHERE y > {n}",
    'SELECT {s}::"Odd ""name""", {s}::text, {s}::pagila2.mpaa_rating',
]
_CONSTANTS: Final = {
    "s": st.text(alphabet=st.sampled_from(list("ab'\"\\:{}[]é \n")), max_size=8).map(
        lambda text: "'" + text.replace("'", "''") + "'"
    ),
    "n": st.integers(min_value=-(2**31), max_value=2**31 - 1).map(str),
}


@st.composite
def _same_shape_pair(draw: st.DrawFn) -> tuple[str, str]:
    template = draw(st.sampled_from(_TEMPLATES))

    def member() -> str:
        parts = template.split("{")
        text = parts[0]
        for part in parts[1:]:
            text += draw(_CONSTANTS[part[0]]) + part[2:]
        return text

    return member(), member()


@given(pair=_same_shape_pair(), max_rows=st.integers(1, 50))
def test_a_shape_with_types_builds_the_full_paths_statement(
    pair: tuple[str, str], max_rows: int
) -> None:
    first, second = pair
    like = _render(first)
    tree = parse_tree_text(second)
    built = render_same_shape(second, tree, like, max_rows=max_rows, max_result_bytes=65_536)
    checked = check_untrusted_sql(second, functions=FunctionPolicy(), schemas=_SCHEMAS)
    full = render_statement(checked, _CATALOG, max_rows=max_rows, max_result_bytes=65_536)
    assert built == full


# --- Against the server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def types_server(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    """The suite's server, with the fixture's database loaded (dropped at the end)."""
    with postgres_server.connect(database="postgres") as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{_DATABASE}"')
        conn.execute(f'CREATE DATABASE "{_DATABASE}"')
    try:
        postgres_server.psql(input_text=_FIXTURE.read_text(encoding="utf-8"), database=_DATABASE)
        yield postgres_server
    finally:
        with postgres_server.connect(database="postgres") as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{_DATABASE}" WITH (FORCE)')


def _settings(server: PostgresServer, schemas: tuple[str, ...] = _SCHEMAS) -> Settings:
    return reader_settings(
        server, sql_dsn=SecretStr(server.dsn(database=_DATABASE)), sql_schemas=schemas
    )


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("SELECT 'PG-13'::mpaa_rating AS r", [["PG-13"]]),
        ("SELECT enum_range(NULL::mpaa_rating) AS r", [["{G,PG,PG-13,R,NC-17}"]]),
        ("SELECT title FROM film WHERE rating = 'PG-13'::mpaa_rating", [["Bravo"]]),
        ("SELECT title FROM film_list WHERE rating > mpaa_rating 'PG-13'", [["Charlie"]]),
        ("SELECT CAST('2006' AS year) AS y", [[2006]]),
        ("SELECT count(*) AS n FROM film WHERE release_year = 2006::year", [[2]]),
        ("SELECT ARRAY['G', 'R']::mpaa_rating[] AS a", [["{G,R}"]]),
        ("SELECT (NULL::mpaa_rating[]) IS NULL AS a", [[True]]),
        ("SELECT ('(7,x)'::pair).b AS b", [["x"]]),
        ("SELECT (ROW(1, 'y')::pair).a AS a", [[1]]),
        ("SELECT 'b'::only_here AS b", [["b"]]),
        ('SELECT r FROM json_to_record(\'{"r": "R"}\') AS t(r mpaa_rating)', [["R"]]),
        ("SELECT 'G'::mpaa_rating = 'G'::pagila.mpaa_rating AS same", [[True]]),
        # The first schema of MCP_SQL_SCHEMAS wins, for types as for relations.
        ("SELECT enum_range(NULL::shared_t)::text AS t, v FROM shared", [["{first}", "first"]]),
        # A user type named as a built-in one changes nothing.
        ("SELECT 'shadow'::text || 'x' AS t, '5'::int4 + 1 AS i", [["shadowx", 6]]),
        ("SELECT pg_typeof('a'::text)::text AS t", [["text"]]),
        ("SELECT pg_typeof('shadow'::pagila.text)::text AS t", [["pagila.text"]]),
    ],
)
def test_user_types_run_unqualified_on_the_server(
    types_server: PostgresServer, text: str, rows: list[list[Any]]
) -> None:
    assert query(_settings(types_server), text).rows == rows


def test_sql_json_returns_a_user_type_where_the_server_has_it(
    types_server: PostgresServer,
) -> None:
    settings = _settings(types_server)
    text = "SELECT JSON_VALUE('{\"r\": \"R\"}', '$.r' RETURNING mpaa_rating) AS r"
    if types_server.major >= 17:
        assert query(settings, text).rows == [["R"]]
    else:
        assert "needs PostgreSQL 17" in query_failure(settings, text).problem.detail


def test_the_order_of_the_schemas_decides_on_the_server(types_server: PostgresServer) -> None:
    settings = _settings(types_server, ("pagila2", "pagila"))
    text = "SELECT enum_range(NULL::shared_t)::text AS t, v FROM shared"
    assert query(settings, text).rows == [["{second}", "second"]]
    assert query(settings, "SELECT enum_range(NULL::mpaa_rating) AS r").rows == [["{X}"]]


def test_a_type_outside_the_exposed_schemas_is_refused(types_server: PostgresServer) -> None:
    settings = _settings(types_server)
    failure = query_failure(settings, "SELECT 's'::secret")
    assert failure.problem.metadata.get("sqlstate") == "42704"
    detail = failure.problem.detail
    assert "the type 'secret' is in none of pg_catalog" in detail
    assert "MCP_SQL_SCHEMAS (pagila, pagila2)" in detail
    assert "sql_schema" in detail
    qualified = query_failure(settings, "SELECT 's'::hidden.secret")
    assert qualified.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert "The type hidden.secret is not allowed" in qualified.problem.detail


@pytest.mark.parametrize(
    ("unqualified", "qualified", "refused"),
    [
        # The cast from integer runs planted code, as PostgreSQL resolves it.
        ("SELECT 1::mpaa_rating", "SELECT 1::pagila.mpaa_rating", "pagila.planted_cast(integer)"),
        # A domain whose CHECK calls a function the reader may not execute.
        ("SELECT 1::hooked", "SELECT 1::pagila.hooked", "The domain pagila.hooked"),
    ],
)
def test_what_a_type_runs_is_checked_alike_qualified_or_not(
    types_server: PostgresServer, unqualified: str, qualified: str, refused: str
) -> None:
    settings = _settings(types_server)
    first = query_failure(settings, unqualified)
    second = query_failure(settings, qualified)
    assert first.problem.code is second.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert first.problem.detail == second.problem.detail
    assert refused in first.problem.detail


def test_a_name_in_a_string_is_told_its_schema(types_server: PostgresServer) -> None:
    settings = _settings(types_server)
    view = query_failure(settings, "SELECT 'film_list'::regclass")
    assert "write it with its schema ('pagila.film_list')" in view.problem.detail
    assert "sql_schema lists them" not in view.problem.detail
    kind = query_failure(settings, "SELECT 'mpaa_rating'::regtype")
    assert "write it with its schema ('pagila.mpaa_rating')" in kind.problem.detail
    missing = query_failure(settings, "SELECT 'nosuch'::regclass")
    assert "the relation 'nosuch' named in a string is in none of pg_catalog" in (
        missing.problem.detail
    )
    assert "(public.nosuch)" not in missing.problem.detail
    rows = query(settings, "SELECT 'pagila.film_list'::regclass::text AS r").rows
    assert rows == [["pagila.film_list"]]


def test_a_type_created_or_dropped_later_is_not_qualified_from_a_stale_catalog(
    types_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As for relations: the catalog, and every statement and shape built with it, last
    # CATALOG_TTL_S at most (made 0 here), and a name not found reads it again.
    monkeypatch.setattr(sql_session, "CATALOG_TTL_S", 0.0)
    monkeypatch.setattr(sql_session, "CATALOG_MISS_REFRESH_S", 0.0)

    async def body() -> list[Any]:
        tool = SQLTool(_settings(types_server))
        seen: list[Any] = []

        async def run(text: str) -> None:
            try:
                seen.append((await tool.run(ReadOnlySQLParams(query=text))).rows)
            except ToolFailure as exc:
                seen.append(exc.problem.metadata.get("sqlstate"))

        def ddl(text: str) -> None:
            with types_server.connect(database=_DATABASE) as conn:
                conn.execute(text)

        shape = "SELECT enum_range(NULL::later_t)::text AS t, {} AS n"
        try:
            await run(shape.format(1))  # Found nowhere yet.
            ddl("CREATE TYPE pagila2.later_t AS ENUM ('two')")
            await run(shape.format(2))
            await run(shape.format(3))  # The cached shape.
            ddl("CREATE TYPE pagila.later_t AS ENUM ('one')")
            await run(shape.format(4))  # The same shape: the first schema now holds it.
            ddl("DROP TYPE pagila.later_t")
            await run(shape.format(5))
        finally:
            await tool.aclose()
            ddl("DROP TYPE IF EXISTS pagila.later_t; DROP TYPE IF EXISTS pagila2.later_t")
        return seen

    assert asyncio.run(body()) == [
        "42704",
        [["{two}", 2]],
        [["{two}", 3]],
        [["{one}", 4]],
        [["{two}", 5]],
    ]


def test_a_type_created_a_moment_ago_is_found_on_the_next_call(
    types_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name the catalog does not hold reads it again (at most once a second, made 0 here),
    # for types as for relations; the catalog's own age (30 s) is left as it is.
    monkeypatch.setattr(sql_session, "CATALOG_MISS_REFRESH_S", 0.0)

    async def body() -> list[Any]:
        tool = SQLTool(_settings(types_server))
        seen: list[Any] = []
        try:
            for step in ("before", "create", "after"):
                if step == "create":
                    with types_server.connect(database=_DATABASE) as conn:
                        conn.execute("CREATE TYPE pagila2.newer_t AS ENUM ('new')")
                    continue
                try:
                    text = "SELECT 'new'::newer_t AS v"
                    seen.append((await tool.run(ReadOnlySQLParams(query=text))).rows)
                except ToolFailure as exc:
                    seen.append(exc.problem.metadata.get("sqlstate"))
        finally:
            await tool.aclose()
            with types_server.connect(database=_DATABASE) as conn:
                conn.execute("DROP TYPE IF EXISTS pagila2.newer_t")
        return seen

    assert asyncio.run(body()) == ["42704", [["new"]]]


def test_the_catalog_comes_in_the_order_of_the_schemas_searched(
    types_server: PostgresServer,
) -> None:
    # Its bound (`MAX_CATALOG_RELATIONS` of each kind) then drops the names of the last
    # schemas searched, never pg_catalog's: a user's `text` never stands in for the built-in.
    # The fixture creates pagila.shared after pagila2's types, so the table's order is not.
    order = ("pg_catalog", "pagila", "pagila2")

    async def body() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        conn = await psycopg.AsyncConnection.connect(types_server.dsn(database=_DATABASE))
        try:
            return await sql_session._read_catalog(conn, (*order, "pagila"))
        finally:
            await conn.close()

    relations, types = asyncio.run(body())
    for found in (relations, types):
        ranks = [order.index(schema) for schema, _ in found]
        assert ranks == sorted(ranks)
        assert set(ranks) == {0, 1, 2}
    assert ("pagila", "shared") in relations
    assert ("pagila2", "shared_t") in types
