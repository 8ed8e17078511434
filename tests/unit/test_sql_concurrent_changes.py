"""What read_only_sql and sql_schema answer when the database changes under a call.

An operator's session changes the catalog or the role between two round trips of one call
(after PostgreSQL resolved the query and before its objects' facts are read; between two
calls of one shape; between sql_schema's two descriptions of a table; while holding a
catalog locked). Each change is made by the superuser at that moment, through a hook on the
tool's own pool, and the answer is what the real server then makes of it.
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, TypeVar

import pytest

from mcp_server_suite.config import Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams, SQLSchemaParams
from mcp_server_suite.tools.sql.schema_tool import SchemaTool
from mcp_server_suite.tools.sql.session import CATALOG_MISS_REFRESH_S, ReadOnlyDatabase
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import READER_ROLE, PostgresServer, reader_settings
from tests.unit.test_sql_tool import run_with_tool

pytestmark = pytest.mark.postgres

T = TypeVar("T")

# What the role audit reports for a role given BYPASSRLS (issue 19, item 3).
BYPASSRLS_PROBLEM: Final = (
    f"the role {READER_ROLE} has BYPASSRLS: a plain SELECT reads the rows row-level "
    f"security hides; fix: ALTER ROLE {READER_ROLE} NOBYPASSRLS"
)
# The schemas a refusal of a relation names.
SHOWN_SCHEMAS: Final = "information_schema, pg_catalog, public"


def _superuser(server: PostgresServer, *statements: str) -> None:
    with server.connect() as conn:
        for statement in statements:
            conn.execute(statement)


def _after_resolve(
    monkeypatch: pytest.MonkeyPatch, database: ReadOnlyDatabase, change: Callable[[], None]
) -> None:
    # The change runs once PostgreSQL has resolved the query, before anything else of the call.
    resolve = database.resolve

    async def resolved_then_changed(query: str, newer_literal: str | None = None) -> bytes:
        tree = await resolve(query, newer_literal)
        change()
        return tree

    monkeypatch.setattr(database, "resolve", resolved_then_changed)


def _violation_after_resolve(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch, text: str, *statements: str
) -> ToolFailure:
    async def body(tool: SQLTool) -> ToolFailure:
        _after_resolve(monkeypatch, await tool.database(), lambda: _superuser(server, *statements))
        with pytest.raises(ToolFailure) as caught:
            await tool.run(ReadOnlySQLParams(query=text))
        return caught.value

    failure = run_with_tool(reader_settings(server), body)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.invalid_params == ("query",)
    return failure


def _oid(server: PostgresServer, cast: str) -> int:
    with server.connect() as conn:
        row = conn.execute(f"SELECT {cast}::oid::int8").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def bypassrls(postgres_server: PostgresServer) -> Iterator[Callable[[], None]]:
    # Gives the reader BYPASSRLS when called; the test's end takes it back.
    try:
        yield lambda: _superuser(postgres_server, f"ALTER ROLE {READER_ROLE} BYPASSRLS")
    finally:
        _superuser(postgres_server, f"ALTER ROLE {READER_ROLE} NOBYPASSRLS")


def test_a_type_dropped_before_its_facts_are_read_is_refused(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _superuser(postgres_server, "CREATE TYPE public.vanishing AS ENUM ('a')")
    try:
        oid = _oid(postgres_server, "'public.vanishing'::regtype")
        failure = _violation_after_resolve(
            postgres_server,
            monkeypatch,
            "SELECT NULL::public.vanishing",
            "DROP TYPE public.vanishing",
        )
    finally:
        _superuser(postgres_server, "DROP TYPE IF EXISTS public.vanishing")
    # The type is gone: PostgreSQL can name it by its object id alone.
    assert failure.problem.detail == (
        f"The type {oid} is not allowed: its input, output or other support functions are "
        "neither built in, part of a trusted extension, nor allowed."
    )
    assert failure.problem.metadata == {"refused": "type"}


def test_a_relation_dropped_before_its_facts_are_read_is_refused(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _superuser(
        postgres_server,
        "CREATE TABLE public.vanishing_t (x int)",
        f"GRANT SELECT ON public.vanishing_t TO {READER_ROLE}",
    )
    try:
        oid = _oid(postgres_server, "'public.vanishing_t'::regclass")
        failure = _violation_after_resolve(
            postgres_server,
            monkeypatch,
            "SELECT x FROM public.vanishing_t",
            "DROP TABLE public.vanishing_t",
        )
    finally:
        _superuser(postgres_server, "DROP TABLE IF EXISTS public.vanishing_t")
    assert failure.problem.detail == (
        f"The relation {oid} is not allowed: this tool reads the schemas {SHOWN_SCHEMAS} only."
    )
    assert failure.problem.metadata == {"refused": "relation"}


def test_a_relation_moved_out_of_the_schemas_before_its_facts_are_read_is_refused(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _superuser(
        postgres_server,
        "CREATE SCHEMA elsewhere",
        f"GRANT USAGE ON SCHEMA elsewhere TO {READER_ROLE}",
        "CREATE TABLE public.moving (x int)",
        f"GRANT SELECT ON public.moving TO {READER_ROLE}",
    )
    try:
        failure = _violation_after_resolve(
            postgres_server,
            monkeypatch,
            "SELECT x FROM public.moving",
            "ALTER TABLE public.moving SET SCHEMA elsewhere",
        )
    finally:
        _superuser(postgres_server, "DROP SCHEMA elsewhere CASCADE")
    assert failure.problem.detail == (
        "The relation elsewhere.moving is not allowed: this tool reads the schemas "
        f"{SHOWN_SCHEMAS} only."
    )
    assert failure.problem.metadata == {"refused": "relation"}


def test_a_role_change_between_calls_is_refused_by_the_probe(
    postgres_server: PostgresServer, bypassrls: Callable[[], None]
) -> None:
    # One pooled connection, audited by the first call; the second call's query has a shape
    # not seen yet, so the probe's guard is the first statement to meet the change.
    async def body(tool: SQLTool) -> ToolFailure:
        assert (await tool.run(ReadOnlySQLParams(query="SELECT 1"))).rows == [[1]]
        bypassrls()
        with pytest.raises(ToolFailure) as caught:
            await tool.run(ReadOnlySQLParams(query="SELECT 2 + 3"))
        return caught.value

    failure = run_with_tool(reader_settings(postgres_server, sql_pool_max_size=1), body)
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert failure.problem.detail.endswith(BYPASSRLS_PROBLEM)
    assert failure.problem.metadata == {"role_problems": 1, "first_problem": "attribute"}


def test_a_relation_dropped_after_its_statement_was_checked_gets_the_search_hint(
    postgres_server: PostgresServer,
) -> None:
    _superuser(
        postgres_server,
        "CREATE TABLE public.dropped_later (x int)",
        f"GRANT SELECT ON public.dropped_later TO {READER_ROLE}",
    )

    async def body(tool: SQLTool) -> ToolFailure:
        params = ReadOnlySQLParams(query="SELECT x FROM public.dropped_later")
        assert (await tool.run(params)).rows == []
        # The checked statement is kept with the catalog it was built with: it runs again
        # without a probe, and PostgreSQL no longer finds the table.
        _superuser(postgres_server, "DROP TABLE public.dropped_later")
        with pytest.raises(ToolFailure) as caught:
            await tool.run(params)
        return caught.value

    try:
        failure = run_with_tool(reader_settings(postgres_server), body)
    finally:
        _superuser(postgres_server, "DROP TABLE IF EXISTS public.dropped_later")
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.detail == (
        'PostgreSQL refused the query (SQLSTATE 42P01): \'relation "public.dropped_later" '
        "does not exist'. Unqualified tables and views are looked up in pg_catalog, then in "
        "MCP_SQL_SCHEMAS (public); sql_schema lists them."
    )
    assert failure.problem.metadata == {"sqlstate": "42P01"}


def test_a_catalog_locked_past_the_timeout_is_an_in_band_timeout(
    postgres_server: PostgresServer,
) -> None:
    # The first call reads the catalogs; a table created after it sends the second call to
    # read them again (once they are a second old), while another session holds pg_proc.

    async def body(tool: SQLTool) -> ToolFailure:
        assert (await tool.run(ReadOnlySQLParams(query="SELECT 1"))).rows == [[1]]
        _superuser(
            postgres_server,
            "CREATE TABLE public.created_later (x int)",
            f"GRANT SELECT ON public.created_later TO {READER_ROLE}",
        )
        await asyncio.sleep(CATALOG_MISS_REFRESH_S + 0.1)
        with postgres_server.connect() as lock:
            lock.execute("BEGIN")
            lock.execute("LOCK TABLE pg_catalog.pg_proc IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(ToolFailure) as caught:
                await tool.run(ReadOnlySQLParams(query="SELECT x FROM created_later"))
            lock.execute("ROLLBACK")
        return caught.value

    settings = reader_settings(postgres_server, sql_pool_max_size=1, sql_query_timeout=0.5)
    try:
        failure = run_with_tool(settings, body)
    finally:
        _superuser(postgres_server, "DROP TABLE IF EXISTS public.created_later")
    assert failure.problem.code is MCPErrorCode.EXECUTION_TIMEOUT
    assert failure.problem.detail == (
        "The query ran longer than the 0.5 s statement timeout and was cancelled."
    )
    assert failure.problem.metadata == {"sqlstate": "57014", "timeout_seconds": 0.5}


def _schema_failure(
    settings: Settings, body: Callable[[SchemaTool, SQLTool], Awaitable[Any]]
) -> ToolFailure:
    async def main(tool: SQLTool) -> ToolFailure:
        with pytest.raises(ToolFailure) as caught:
            await body(SchemaTool(tool), tool)
        return caught.value

    return run_with_tool(settings, main)


def test_sql_schema_passes_a_refusal_of_its_first_description_on(
    postgres_server: PostgresServer, bypassrls: Callable[[], None]
) -> None:
    bypassrls()

    async def body(schema: SchemaTool, _: SQLTool) -> None:
        await schema.run(SQLSchemaParams(table="t"))

    failure = _schema_failure(reader_settings(postgres_server), body)
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert failure.problem.detail.endswith(BYPASSRLS_PROBLEM)


def test_sql_schema_passes_a_refusal_of_its_second_description_on(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch, bypassrls: Callable[[], None]
) -> None:
    # A table whose description with its comments is larger than an answer: sql_schema
    # describes it again without them, and the role changes between the two.
    columns = ", ".join(f"c{index} int" for index in range(40))
    comments = [
        f"COMMENT ON COLUMN public.commented.c{index} IS '{'w' * 200}'" for index in range(40)
    ]
    _superuser(
        postgres_server,
        f"CREATE TABLE public.commented ({columns})",
        *comments,
        f"GRANT SELECT ON public.commented TO {READER_ROLE}",
    )

    refusals: list[dict[str, Any]] = []

    async def body(schema: SchemaTool, tool: SQLTool) -> None:
        database = await tool.database()
        run = database.run

        async def changed_after_the_first_refusal(statement: Any) -> Any:
            try:
                return await run(statement)
            except ToolFailure as failure:
                if not refusals:
                    bypassrls()
                refusals.append(dict(failure.problem.metadata))
                raise

        monkeypatch.setattr(database, "run", changed_after_the_first_refusal)
        await schema.run(SQLSchemaParams(table="commented"))

    try:
        failure = _schema_failure(
            reader_settings(postgres_server, sql_max_result_bytes=4096, sql_pool_max_size=1), body
        )
    finally:
        _superuser(postgres_server, "DROP TABLE public.commented")
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert failure.problem.detail.endswith(BYPASSRLS_PROBLEM)
    # The first description was too large; the second met the changed role.
    assert len(refusals) == 2
    assert "row_bytes" in refusals[0]
    assert refusals[1] == {"role_problems": 1, "first_problem": "attribute"}
