"""`sql_schema`: the allowed tables, their columns, keys and comments, as a read-only role sees
them, on the round-2 clean database."""

# ruff: noqa: S608
# (Fixed table names of the test fixture are formatted into SQL.)

import asyncio
import json
from pathlib import Path
from typing import Any

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


def describe(server: PostgresServer, table: str | None = None, **extra: Any) -> SQLSchemaResult:
    settings = Settings(
        sql_dsn=SecretStr(server.dsn(HOSTILE_READER, database=CLEAN_DATABASE)),
        sql_trusted_extensions=("tsm_system_rows",),
        **extra,
    )

    async def main() -> SQLSchemaResult:
        specs = build_sql_tools(settings)
        try:
            result: SQLSchemaResult = await specs["sql_schema"].run(SQLSchemaParams(table=table))
            return result
        finally:
            close = specs["sql_schema"].close
            assert close is not None
            await close()

    return asyncio.run(main())


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
