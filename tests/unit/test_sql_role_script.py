"""`scripts/least-privilege-role.sql` on the server the suite runs (15, or 18 from the wheel),
on a database shaped like real sample databases (`tests/vectors/sql_catalog_shapes.sql`:
procedures, a user aggregate that a view calls, enums, domains, materialized views).

1. The script runs to the end with and without its options, twice (it is idempotent), and
   what it revokes is exactly what the role audit refuses stored code to reach
   (`role_audit.STORED_REFUSED`), every overload of every name on this major.
2. The fix lines the audit prints work when run as printed, and leave no problem that
   refuses calls; procedures and trigger functions are never named.
3. A view that calls a function the role may not execute is reported, with the two steps
   that allow it; taken, the view runs.
4. A connection limit below the pool's size is reported, and never refuses a call.
"""

# ruff: noqa: S608
# (Fixed names of the test database are formatted into SQL.)

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import psycopg
import pytest
from pydantic import JsonValue

from mcp_server_suite.tools.sql.role_audit import (
    GUARD_SQLSTATE,
    STORED_REFUSED,
    RoleProblem,
    TrustedCode,
    audit_sql,
)
from tests.support.postgres import PostgresServer
from tests.unit.test_sql_role_audit import run_guard

pytestmark = pytest.mark.postgres

_REPO: Final = Path(__file__).resolve().parents[2]
_SCRIPT: Final = _REPO / "scripts" / "least-privilege-role.sql"
_SHAPES: Final = _REPO / "tests" / "vectors" / "sql_catalog_shapes.sql"
DATABASE: Final = "shapes"
READER: Final = "shapes_ro"
SHOP: Final = TrustedCode(schemas=("shop",), pool_max_size=4)


@pytest.fixture
def shapes(hostile_server: tuple[PostgresServer, Path]) -> Iterator[PostgresServer]:
    """A fresh database loaded with the shapes schema, dropped afterwards with its roles."""
    server, _ = hostile_server
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    try:
        server.psql("-f", str(_SHAPES), database=DATABASE)
        yield server
    finally:
        with server.connect() as conn:
            conn.execute(f"DROP DATABASE {DATABASE} WITH (FORCE)")
            for role in (READER, "shapes_owner"):
                conn.execute(f"DROP ROLE IF EXISTS {role}")


def _harden(server: PostgresServer, *options: str) -> str:
    arguments = ["-v", f"reader={READER}", "-v", "schema=shop", "-v", "owner=shapes_owner"]
    for option in options:
        arguments += ["-v", option]
    return server.psql(*arguments, "-f", str(_SCRIPT), database=DATABASE)


def _audit(server: PostgresServer, trusted: TrustedCode = SHOP) -> list[RoleProblem]:
    with server.connect(READER, database=DATABASE) as conn:
        return [RoleProblem(*map(str, row)) for row in conn.execute(audit_sql(trusted))]


def test_the_script_revokes_exactly_what_the_audit_refuses_stored_code_to_reach() -> None:
    text = _SCRIPT.read_text(encoding="utf-8")
    listed = text[text.index("AND p.proname IN (") : text.index("ORDER BY p.proname, p.oid")]
    assert set(re.findall(r"'([a-z_]+)'", listed)) == STORED_REFUSED


@pytest.mark.parametrize(
    "options",
    [(), ("revoke_public_execute=1",), ("revoke_public_execute=1", "connection_limit=4")],
    ids=["default", "revoke_public_execute", "connection_limit"],
)
def test_the_script_runs_to_the_end_twice_with_its_options(
    shapes: PostgresServer, options: tuple[str, ...]
) -> None:
    for _ in range(2):
        _harden(shapes, *options)
    with shapes.connect(database=DATABASE) as conn:
        row = conn.execute(
            "SELECT rolconnlimit, rolinherit, rolconfig FROM pg_roles WHERE rolname = %s",
            (READER,),
        ).fetchone()
        assert row is not None
        assert row[0] == (4 if "connection_limit=4" in options else 8)
        assert row[1] is False
        executable = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%s) "
            "AND has_function_privilege(%s, p.oid, 'EXECUTE')",
            (sorted(STORED_REFUSED), READER),
        ).fetchall()
        procedures = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE prokind = 'p' "
            "AND pronamespace = 'shop'::regnamespace "
            "AND has_function_privilege(%s, oid, 'EXECUTE')",
            (READER,),
        ).fetchone()
    if options:
        # Every overload, whatever this major calls them (17 added a fourth parameter to
        # pg_logical_emit_message).
        assert executable == []
    else:
        assert len(executable) >= len(STORED_REFUSED)
    # Procedures are left alone: PUBLIC keeps EXECUTE, which no SELECT can use.
    assert procedures == (2,)


def test_every_fix_line_works_as_printed(shapes: PostgresServer) -> None:
    _harden(shapes)
    found = _audit(shapes)
    assert {problem.kind for problem in found} == {"execute"}
    named = " ".join(problem.subject for problem in found)
    # Neither the procedures nor the trigger function can be reached from a SELECT.
    for unreachable in ("reprice", "archive", "touch"):
        assert unreachable not in named
    assert "shop.join_text(text)" in named
    with shapes.connect(database=DATABASE) as conn:
        for problem in found:
            conn.execute(problem.fix.split(", or ")[0])
    assert [problem for problem in _audit(shapes) if problem.refuses] == []
    with shapes.connect(READER, database=DATABASE) as conn:
        run_guard(conn, SHOP)


def test_a_view_the_role_cannot_run_is_reported_with_the_way_to_allow_it(
    shapes: PostgresServer,
) -> None:
    output = _harden(shapes, "revoke_public_execute=1")
    assert "view shop.item_list calls shop.join_text(text)" in output
    assert f"GRANT EXECUTE ON FUNCTION shop.join_text(text) TO {READER};" in output
    assert "add shop.join_text to MCP_SQL_ALLOWED_FUNCTIONS" in output
    reading = "SELECT count(people) FROM shop.item_list"
    with (
        shapes.connect(READER, database=DATABASE) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(reading)
    (view,) = _audit(shapes)
    assert view.kind == "view"
    assert not view.refuses
    assert "shop.item_list" in view.subject
    assert "42501" in view.subject
    # The advice's first way, taken as printed: the grant, and the function trusted.
    grant = view.fix.removeprefix("if its code is trusted, ").split(" and add ")[0]
    assert grant == f"GRANT EXECUTE ON FUNCTION shop.join_text(text) TO {READER}"
    with shapes.connect(database=DATABASE) as conn:
        conn.execute(grant)
    trusted = TrustedCode(schemas=("shop",), functions=("shop.join_text",), pool_max_size=4)
    assert _audit(shapes, trusted) == []
    with shapes.connect(READER, database=DATABASE) as conn:
        assert conn.execute(reading).fetchone() == (2,)
        run_guard(conn, trusted)
    # Its other way works too: the view is no longer readable, so nothing is reported.
    with shapes.connect(database=DATABASE) as conn:
        conn.execute(f"REVOKE EXECUTE ON FUNCTION shop.join_text(text) FROM {READER}")
        conn.execute(view.fix.split("; if not, ")[1])
    assert _audit(shapes) == []


def test_a_connection_limit_below_the_pool_is_reported_and_never_refuses(
    shapes: PostgresServer,
) -> None:
    _harden(shapes, "revoke_public_execute=1", "connection_limit=3")
    with shapes.connect(database=DATABASE) as conn:
        conn.execute(f"REVOKE SELECT ON shop.item_list FROM {READER}")
        conn.execute(f"ALTER DATABASE {DATABASE} CONNECTION LIMIT 2")
    try:
        found = _audit(shapes)
        assert [problem.kind for problem in found] == ["connections", "connections"]
        assert all(not problem.refuses for problem in found)
        fixes = sorted(problem.fix for problem in found)
        assert fixes == [
            f"ALTER DATABASE {DATABASE} CONNECTION LIMIT 4, or set MCP_SQL_POOL_MAX_SIZE=2",
            f"ALTER ROLE {READER} CONNECTION LIMIT 4, or set MCP_SQL_POOL_MAX_SIZE=3",
        ]
        # Within the limits, nothing is said.
        assert _audit(shapes, TrustedCode(schemas=("shop",), pool_max_size=2)) == []
        with shapes.connect(READER, database=DATABASE) as conn:
            run_guard(conn, SHOP)
    finally:
        with shapes.connect(database=DATABASE) as conn:
            conn.execute(f"ALTER DATABASE {DATABASE} CONNECTION LIMIT -1")


def test_procedures_and_trigger_functions_never_fail_the_guard(shapes: PostgresServer) -> None:
    _harden(shapes, "revoke_public_execute=1")
    with shapes.connect(database=DATABASE) as conn:
        conn.execute("GRANT EXECUTE ON PROCEDURE shop.reprice(numeric) TO PUBLIC")
        conn.execute("GRANT EXECUTE ON FUNCTION shop.touch() TO PUBLIC")
    assert [problem for problem in _audit(shapes) if problem.refuses] == []
    with shapes.connect(READER, database=DATABASE) as conn:
        run_guard(conn, SHOP)
        # A function a SELECT can call, granted the same way, fails it.
    with shapes.connect(database=DATABASE) as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION shop.in_stock(integer) TO PUBLIC")
    with shapes.connect(READER, database=DATABASE) as conn, pytest.raises(psycopg.Error) as caught:
        run_guard(conn, SHOP)
    assert caught.value.sqlstate == GUARD_SQLSTATE


def test_the_server_serves_through_advice_and_says_it_once_on_stderr(
    shapes: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from mcp_server_suite.config import SecretStr, Settings
    from mcp_server_suite.schemas.sql import ReadOnlySQLParams
    from mcp_server_suite.tools.sql.tool import SQLTool

    _harden(shapes, "revoke_public_execute=1", "connection_limit=3")
    settings = Settings(
        sql_dsn=SecretStr(shapes.dsn(READER, database=DATABASE)),
        sql_schemas=("shop",),
        sql_pool_max_size=4,
    )

    async def main() -> list[list[JsonValue]]:
        tool = SQLTool(settings)
        counting = ReadOnlySQLParams(query="SELECT count(*) FROM item")
        try:
            results = [await tool.run(counting) for _ in range(3)]
            return results[-1].rows
        finally:
            await tool.aclose()

    with caplog.at_level("WARNING"):
        assert asyncio.run(main()) == [[3]]
    advice = [
        record.getMessage() for record in caplog.records if "read_only_sql: " in record.getMessage()
    ]
    assert sorted(advice) == sorted(set(advice))
    assert any(f"the role {READER} may open at most 3 connections" in line for line in advice)
    assert any("the view shop.item_list calls shop.join_text(text)" in line for line in advice)
