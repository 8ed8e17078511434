"""`sql_schema`: the allowed tables, their columns, keys and comments, as a read-only role sees
them, on the round-2 clean database."""

# ruff: noqa: S608
# (Fixed table names of the test fixture are formatted into SQL.)

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import ValidationError

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import SQLSchemaParams, SQLSchemaResult
from mcp_server_suite.tools.sql import build_sql_tools
from mcp_server_suite.tools.sql.schema_tool import schema_sql
from tests.support.postgres import CLEAN_DATABASE, HOSTILE_READER, PostgresServer

pytestmark = pytest.mark.postgres


T = TypeVar("T")
Run = Callable[[SQLSchemaParams], Awaitable[Any]]


def _with_tool(server: PostgresServer, body: Callable[[Run], Awaitable[T]], **extra: Any) -> T:
    # Builds the tool as the reader of the clean database, runs `body` with it, closes it.
    settings = Settings(
        sql_dsn=SecretStr(server.dsn(HOSTILE_READER, database=CLEAN_DATABASE)),
        sql_trusted_extensions=("tsm_system_rows",),
        **extra,
    )

    async def main() -> T:
        specs = build_sql_tools(settings)
        try:
            return await body(specs["sql_schema"].run)
        finally:
            close = specs["sql_schema"].close
            assert close is not None
            await close()

    return asyncio.run(main())


def describe(server: PostgresServer, table: str | None = None, **extra: Any) -> SQLSchemaResult:
    async def body(run: Run) -> SQLSchemaResult:
        result: SQLSchemaResult = await run(SQLSchemaParams(table=table))
        return result

    return _with_tool(server, body, **extra)


def test_every_readable_table_and_view_is_listed(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    result = describe(server)
    names = [(table.schema_name, table.name, table.kind) for table in result.tables]
    assert ("public", "orders", "table") in names
    assert ("public", "v_customer_orders", "view") in names
    assert [name for _, name, _ in names] == sorted(name for _, name, _ in names)
    assert result.schemas == ["public"]
    assert result.truncated is False


def test_a_read_only_role_sees_the_foreign_keys(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    # information_schema shows a role only the constraints of tables it owns; this tool
    # reads pg_catalog, so the reader sees them all.
    server, _ = hostile_server
    with server.connect(HOSTILE_READER, database=CLEAN_DATABASE) as conn:
        shown = conn.execute(
            "SELECT count(*) FROM information_schema.referential_constraints"
        ).fetchone()
    assert shown == (0,)
    (items,) = describe(server, "order_items").tables
    assert items.primary_key == ["order_id", "product_id"]
    targets = sorted(
        (fk.columns, fk.references_table, fk.references_columns) for fk in items.foreign_keys
    )
    assert targets == [(["order_id"], "orders", ["id"]), (["product_id"], "products", ["id"])]
    columns = {column.name: (column.type, column.nullable) for column in items.columns}
    assert columns == {
        "order_id": ("integer", False),
        "product_id": ("integer", False),
        "qty": ("integer", True),
    }


def test_comments_are_shown_and_bounded(hostile_server: tuple[PostgresServer, Path]) -> None:
    server, _ = hostile_server
    with server.connect(database=CLEAN_DATABASE) as conn:
        conn.execute("COMMENT ON TABLE public.orders IS 'One row per order.'")
        conn.execute(f"COMMENT ON COLUMN public.orders.meta IS '{'m' * 700}'")
    try:
        (orders,) = describe(server, "public.orders").tables
    finally:
        with server.connect(database=CLEAN_DATABASE) as conn:
            conn.execute("COMMENT ON TABLE public.orders IS NULL")
            conn.execute("COMMENT ON COLUMN public.orders.meta IS NULL")
    assert orders.comment == "One row per order."
    meta = next(column for column in orders.columns if column.name == "meta")
    assert meta.type == "jsonb"
    assert meta.comment == "m" * 500


@pytest.mark.parametrize(
    ("table", "code"),
    [
        ("no_such_table", MCPErrorCode.VALIDATION_ERROR),
        ("evidence.evil_log", MCPErrorCode.ACCESS_DENIED),
        ("pg_catalog.pg_class", MCPErrorCode.ACCESS_DENIED),
        ("x\x00y", MCPErrorCode.VALIDATION_ERROR),
    ],
)
def test_unknown_or_foreign_tables_are_refused_in_band(
    hostile_server: tuple[PostgresServer, Path], table: str, code: MCPErrorCode
) -> None:
    server, _ = hostile_server
    with pytest.raises(ToolFailure) as caught:
        describe(server, table)
    assert caught.value.problem.code is code
    assert caught.value.problem.invalid_params == ("table",)


def test_a_table_the_role_may_not_read_is_not_listed(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    with server.connect(database=CLEAN_DATABASE) as conn:
        conn.execute(f"REVOKE SELECT ON public.notes FROM {HOSTILE_READER}")
    try:
        names = [table.name for table in describe(server).tables]
        with pytest.raises(ToolFailure):
            describe(server, "notes")
    finally:
        with server.connect(database=CLEAN_DATABASE) as conn:
            conn.execute(f"GRANT SELECT ON public.notes TO {HOSTILE_READER}")
    assert "notes" not in names


def test_the_answer_is_bounded_in_bytes(hostile_server: tuple[PostgresServer, Path]) -> None:
    server, _ = hostile_server
    columns = ", ".join(f"column_{index} text" for index in range(40))
    with server.connect(database=CLEAN_DATABASE) as conn:
        for index in range(20):
            conn.execute(f"CREATE TABLE public.wide_{index} ({columns})")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {HOSTILE_READER}")
    try:
        result = describe(server, sql_max_result_bytes=4096)
    finally:
        with server.connect(database=CLEAN_DATABASE) as conn:
            for index in range(20):
                conn.execute(f"DROP TABLE public.wide_{index}")
    assert result.truncated is True
    assert 0 < len(result.tables) < 31
    assert len(result.model_dump_json()) < 4 * 4096


def test_the_caller_table_name_is_a_literal() -> None:
    sql = schema_sql(("public",), "x' OR true --", "public")
    assert "c.relname OPERATOR(pg_catalog.=) 'x'' OR true --'" in sql


@pytest.mark.parametrize("arguments", [{"table": ""}, {"table": "x" * 131}, {"schema": "public"}])
def test_arguments_outside_the_contract_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SQLSchemaParams.model_validate_json(json.dumps(arguments))


def _listing(server: PostgresServer, **extra: Any) -> list[SQLSchemaResult]:
    # Every page of a listing, each asked for with the previous page's next_after.
    async def body(run: Run) -> list[SQLSchemaResult]:
        pages: list[SQLSchemaResult] = []
        after: str | None = None
        while len(pages) < 100:
            page: SQLSchemaResult = await run(SQLSchemaParams(after=after))
            pages.append(page)
            if not page.truncated:
                break
            assert page.next_after is not None
            after = page.next_after
        return pages

    return _with_tool(server, body, **extra)


def _create(server: PostgresServer, statements: list[str]) -> None:
    server.psql(input_text=";\n".join(statements) + ";\n", database=CLEAN_DATABASE)


def test_a_listing_pages_past_every_table_once_in_order(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    columns = ", ".join(f"column_{index} text" for index in range(40))
    names = [f"page_{index:02}" for index in range(25)]
    _create(server, [f"CREATE TABLE public.{name} ({columns})" for name in names])
    _create(server, [f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {HOSTILE_READER}"])
    try:
        whole = describe(server)
        pages = _listing(server, sql_max_result_bytes=4096)
    finally:
        _create(server, [f"DROP TABLE public.{name}" for name in names])
    assert not whole.truncated
    assert len(pages) > 3
    assert all(page.tables for page in pages)
    assert [page.truncated for page in pages] == [True] * (len(pages) - 1) + [False]
    assert pages[-1].next_after is None
    for page in pages[:-1]:
        assert page.next_after == f"public.{page.tables[-1].name}"
    listed = [(table.schema_name, table.name) for page in pages for table in page.tables]
    assert listed == [(table.schema_name, table.name) for table in whole.tables]


def test_a_table_too_large_for_an_answer_does_not_stop_the_listing(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    # 1,600 columns with long comments: with them, its description is larger than an answer
    # may be; it is listed without comments, alone, and the tables after it follow.
    server, _ = hostile_server
    columns = ", ".join(f"c{index} int" for index in range(1600))
    comment = "w" * 600
    _create(
        server,
        [
            f"CREATE TABLE public.aaa_wide ({columns})",
            "CREATE TABLE public.zzz_after (id int)",
            f"COMMENT ON TABLE public.aaa_wide IS '{comment}'",
            *(
                f"COMMENT ON COLUMN public.aaa_wide.c{index} IS '{comment}'"
                for index in range(1600)
            ),
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {HOSTILE_READER}",
        ],
    )
    try:
        pages = _listing(server, sql_max_result_bytes=262_144)
        (alone,) = describe(server, "aaa_wide", sql_max_result_bytes=262_144).tables
        with pytest.raises(ToolFailure) as caught:
            describe(server, "aaa_wide", sql_max_result_bytes=4096)
    finally:
        _create(server, ["DROP TABLE public.aaa_wide", "DROP TABLE public.zzz_after"])
    tables = [table for page in pages for table in page.tables]
    names = [table.name for table in tables]
    assert "aaa_wide" in names
    assert names[-1] == "zzz_after"
    wide = tables[names.index("aaa_wide")]
    assert wide.comments_omitted is True
    assert len(wide.columns) == 1600
    assert wide.comment is None
    assert all(column.comment is None for column in wide.columns)
    assert alone.comments_omitted is True
    assert len(alone.columns) == 1600
    assert not any(table.comments_omitted for table in tables if table.name != "aaa_wide")
    # Too large even without comments: the advice is the operator's, not read_only_sql's.
    detail = caught.value.problem.detail
    assert "MCP_SQL_MAX_RESULT_BYTES" in detail
    assert "substr" not in detail


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"table": "orders", "after": "public.orders"}, MCPErrorCode.VALIDATION_ERROR),
        ({"after": "orders"}, MCPErrorCode.VALIDATION_ERROR),
        ({"after": "public."}, MCPErrorCode.VALIDATION_ERROR),
        ({"after": "evidence.evil_log"}, MCPErrorCode.ACCESS_DENIED),
        ({"after": "public.x\x00"}, MCPErrorCode.VALIDATION_ERROR),
    ],
)
def test_after_outside_its_contract_is_refused_in_band(
    hostile_server: tuple[PostgresServer, Path], arguments: dict[str, str], code: MCPErrorCode
) -> None:
    server, _ = hostile_server
    with pytest.raises(ToolFailure) as caught:
        _with_tool(server, lambda run: run(SQLSchemaParams(**arguments)))
    assert caught.value.problem.code is code
    assert caught.value.problem.invalid_params == ("after",)


def test_after_is_a_literal_in_the_listings_order() -> None:
    sql = schema_sql(("public",), None, None, after=("public", "x' OR true --"))
    assert "c.relname OPERATOR(pg_catalog.>) 'x'' OR true --'::pg_catalog.name" in sql


def test_after_is_listed_as_a_nullable_string_with_its_bounds_in_words() -> None:
    listed = SQLSchemaParams.model_json_schema()["properties"]["after"]
    assert listed["type"] == ["string", "null"]
    assert "anyOf" not in listed
    assert (listed["minLength"], listed["maxLength"]) == (1, 130)
    assert "default" not in listed
    assert "1 to 130 characters" in listed["description"]
    assert "null lists from the first table" in listed["description"]
    assert SQLSchemaParams.model_validate_json('{"after": null}').after is None
    with pytest.raises(ValidationError):
        SQLSchemaParams.model_validate_json('{"after": ""}')
