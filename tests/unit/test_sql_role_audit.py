"""The role audit: what PostgreSQL checks, what the audit finds, and how calls are refused.

1. The claims the audit rests on, verified on the test server: PostgreSQL checks EXECUTE,
   for the role running the query, on the functions of implicit casts, domain CHECKs,
   aggregates, operators, views and row-level-security policies; it does not on a range
   type's `subtype_diff`, which the planner calls while estimating (so the audit reports
   such types whoever may execute the function).
2. Each problem kind is found, named with its fix, and makes the per-call guard fail.
3. `--check-config` prints one line per problem and fails; `--offline` connects to nothing.
"""

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import psycopg.sql
import pytest

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.role_audit import (
    GUARD_SQLSTATE,
    UNCHANGED_GUARD,
    RoleProblem,
    TrustedCode,
    audit_database,
    audit_sql,
    guard_sql,
    refusal,
)
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import CLEAN_DATABASE, HOSTILE_READER, PostgresServer

pytestmark = pytest.mark.postgres

TRUSTED: Final = TrustedCode(schemas=("public",))
PROBE_ROLE: Final = "audit_probe"


@pytest.fixture
def scratch(hostile_server: tuple[PostgresServer, Path]) -> Iterator[PostgresServer]:
    """A schema `v` owned by another role, and a reader role with USAGE and SELECT on it."""
    server, _ = hostile_server
    with server.connect() as conn:
        conn.execute("CREATE ROLE audit_owner LOGIN")
        conn.execute(f"CREATE ROLE {PROBE_ROLE} LOGIN NOINHERIT")
        conn.execute(f"GRANT CONNECT ON DATABASE app TO {PROBE_ROLE}")
        conn.execute("CREATE SCHEMA v AUTHORIZATION audit_owner")
        conn.execute(f"GRANT USAGE ON SCHEMA v TO {PROBE_ROLE}")
        conn.execute(
            "ALTER DEFAULT PRIVILEGES FOR ROLE audit_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC"
        )
    try:
        yield server
    finally:
        with server.connect() as conn:
            conn.execute("DROP SCHEMA v CASCADE")
            conn.execute("DROP OWNED BY audit_owner, audit_probe CASCADE")
            conn.execute("DROP ROLE audit_owner")
            conn.execute(f"DROP ROLE {PROBE_ROLE}")


def _as_owner(server: PostgresServer, *statements: str) -> None:
    with server.connect() as conn:
        conn.execute("SET ROLE audit_owner")
        for statement in statements:
            conn.execute(statement)


def _notices(server: PostgresServer, query: str) -> tuple[list[str], str | None]:
    # Runs a query as the probe role; returns the planted code's notices and the SQLSTATE.
    with server.connect(PROBE_ROLE) as conn:
        seen: list[str] = []
        conn.add_notice_handler(lambda diag: seen.append(str(diag.message_primary)))
        conn.execute("SET statement_timeout = '5s'")
        try:
            conn.execute(query)
        except psycopg.Error as exc:
            return seen, exc.sqlstate
        return seen, None


def _problems(
    server: PostgresServer, user: str = PROBE_ROLE, trusted: TrustedCode = TRUSTED
) -> list[RoleProblem]:
    with server.connect(user) as conn:
        return [RoleProblem(*map(str, row)) for row in conn.execute(audit_sql(trusted)).fetchall()]


def run_guard(
    conn: psycopg.Connection[tuple[object, ...]], trusted: TrustedCode, last: str = ""
) -> str:
    # Runs the guard as the session does: prepared, given the snapshot it last passed under.
    conn.execute(f"PREPARE probe_guard(pg_catalog.text) AS {guard_sql(trusted)}")
    try:
        row = conn.execute(
            psycopg.sql.SQL("EXECUTE probe_guard({})").format(psycopg.sql.Literal(last))
        ).fetchone()
    finally:
        conn.execute("DEALLOCATE probe_guard")
    assert row is not None
    return str(row[0])


def _guard_fails(server: PostgresServer, user: str = PROBE_ROLE) -> bool:
    with server.connect(user) as conn:
        try:
            run_guard(conn, TRUSTED)
        except psycopg.Error as exc:
            return exc.sqlstate == GUARD_SQLSTATE
        return False


_PLANTED: Final = (
    "CREATE FUNCTION v.f(integer) RETURNS boolean LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE NOTICE 'planted f ran'; RETURN true; END $$",
    "CREATE TYPE v.col AS ENUM ('a', 'b')",
    "CREATE FUNCTION v.col_text(v.col) RETURNS text LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE NOTICE 'planted cast ran'; RETURN 'x'; END $$",
    "CREATE CAST (v.col AS text) WITH FUNCTION v.col_text(v.col) AS IMPLICIT",
    "CREATE DOMAIN v.dom AS integer CHECK (v.f(VALUE))",
    "CREATE FUNCTION v.sf(bigint, text) RETURNS bigint LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE NOTICE 'planted aggregate ran'; RETURN $1 + 1; END $$",
    "CREATE AGGREGATE v.cnt(text) (SFUNC = v.sf, STYPE = bigint, INITCOND = '0')",
    "CREATE FUNCTION v.opf(text, integer) RETURNS boolean LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE NOTICE 'planted operator ran'; RETURN true; END $$",
    "CREATE OPERATOR v.=== (LEFTARG = text, RIGHTARG = integer, FUNCTION = v.opf)",
    "CREATE TABLE v.t(id int, c v.col)",
    "INSERT INTO v.t VALUES (1, 'a')",
    "CREATE VIEW v.vw AS SELECT id, v.f(id) AS x FROM v.t",
    "CREATE TABLE v.p(id int)",
    "INSERT INTO v.p VALUES (1)",
    "ALTER TABLE v.p ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE v.p FORCE ROW LEVEL SECURITY",
    "CREATE POLICY pp ON v.p USING (v.f(id))",
    f"GRANT SELECT ON ALL TABLES IN SCHEMA v TO {PROBE_ROLE}",
)


@pytest.mark.parametrize(
    ("route", "query"),
    [
        ("an implicit cast", "SELECT lower(c) FROM v.t"),
        ("a domain CHECK", "SELECT 5::v.dom"),
        ("an aggregate", "SELECT v.cnt('x')"),
        ("an operator", "SELECT 'a' OPERATOR(v.===) 1"),
        ("a view", "SELECT * FROM v.vw"),
        ("a forced row-level-security policy", "SELECT * FROM v.p"),
    ],
)
def test_postgresql_checks_execute_on_every_route_without_a_name(
    scratch: PostgresServer, route: str, query: str
) -> None:
    _as_owner(scratch, *_PLANTED)
    notices, sqlstate = _notices(scratch, query)
    assert (notices, sqlstate) == ([], "42501"), route
    # And the audit passes for this role: it may execute nothing planted.
    assert [problem for problem in _problems(scratch) if problem.refuses] == []


def test_a_range_types_subtype_diff_runs_without_an_execute_check(scratch: PostgresServer) -> None:
    _as_owner(
        scratch,
        "CREATE FUNCTION v.diff(integer, integer) RETURNS float8 LANGUAGE plpgsql IMMUTABLE AS "
        "$$ BEGIN RAISE NOTICE 'planted subtype_diff ran'; RETURN ($1 - $2)::float8; END $$",
        "CREATE TYPE v.irange AS RANGE (SUBTYPE = integer, SUBTYPE_DIFF = v.diff)",
        "CREATE TABLE v.r(r v.irange)",
        "INSERT INTO v.r SELECT v.irange(g, g + 10) FROM generate_series(1, 300) g",
        "ANALYZE v.r",
        f"GRANT SELECT ON v.r TO {PROBE_ROLE}",
    )
    notices, sqlstate = _notices(scratch, "EXPLAIN SELECT * FROM v.r WHERE r && v.irange(5, 8)")
    # PostgreSQL ran it although the role may not execute it; the audit therefore reports
    # the type itself.
    assert sqlstate is None
    assert "planted subtype_diff ran" in notices
    unchecked = [problem for problem in _problems(scratch) if problem.kind == "unchecked"]
    assert len(unchecked) == 1
    assert "v.irange" in unchecked[0].subject
    assert "DROP TYPE v.irange" in unchecked[0].fix
    assert _guard_fails(scratch)


@pytest.mark.parametrize(
    ("plant", "kind", "fix"),
    [
        (
            (
                "CREATE FUNCTION v.g() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                "GRANT EXECUTE ON FUNCTION v.g() TO PUBLIC",
            ),
            "execute",
            "REVOKE EXECUTE ON FUNCTION v.g() FROM PUBLIC",
        ),
        (
            (
                "CREATE FUNCTION v.g() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                f"GRANT EXECUTE ON FUNCTION v.g() TO {PROBE_ROLE}",
            ),
            "execute",
            f"REVOKE EXECUTE ON FUNCTION v.g() FROM {PROBE_ROLE}",
        ),
        (
            (f"GRANT CREATE ON SCHEMA v TO {PROBE_ROLE}",),
            "create",
            f"REVOKE CREATE ON SCHEMA v FROM {PROBE_ROLE}",
        ),
        (
            ("CREATE VIEW v.kill AS SELECT pg_catalog.pg_cancel_backend(0) AS k",),
            "stored",
            "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(",
        ),
    ],
)
def test_each_problem_is_found_with_its_fix_and_fails_the_guard(
    scratch: PostgresServer, plant: tuple[str, ...], kind: str, fix: str
) -> None:
    _as_owner(scratch, *plant)
    trusted = TrustedCode(schemas=("public", "v"))
    with scratch.connect() as conn:
        # The probe role is not hardened: PUBLIC may still call the escaping built-ins.
        conn.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer) TO PUBLIC")
    try:
        found = [p for p in _problems(scratch, trusted=trusted) if p.kind == kind]
        assert found, kind
        assert any(fix in problem.fix for problem in found)
        with scratch.connect(PROBE_ROLE) as conn:
            with pytest.raises(psycopg.Error) as caught:
                run_guard(conn, trusted)
            assert caught.value.sqlstate == GUARD_SQLSTATE
    finally:
        with scratch.connect() as conn:
            conn.execute(
                "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer) FROM PUBLIC"
            )


def test_membership_of_a_predefined_role_is_a_problem(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    with server.connect() as conn:
        conn.execute(f"GRANT pg_signal_backend TO {HOSTILE_READER}")
    try:
        found = _problems(server, HOSTILE_READER)
        assert [problem.fix for problem in found if problem.kind == "membership"] == [
            f"REVOKE pg_signal_backend FROM {HOSTILE_READER} GRANTED BY postgres"
        ]
    finally:
        with server.connect() as conn:
            conn.execute(f"REVOKE pg_signal_backend FROM {HOSTILE_READER}")
    assert [problem for problem in _problems(server, HOSTILE_READER) if problem.refuses] == []


def test_trusted_extensions_and_allowed_functions_are_trusted(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    with server.connect(database="clean") as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION public.system_rows(internal) TO PUBLIC")
    with server.connect(HOSTILE_READER, database="clean") as conn:
        untrusted = conn.execute(audit_sql(TRUSTED)).fetchall()
        trusted = conn.execute(
            audit_sql(TrustedCode(schemas=("public",), extensions=("tsm_system_rows",)))
        ).fetchall()
        allowed = conn.execute(
            audit_sql(TrustedCode(schemas=("public",), functions=("public.system_rows",)))
        ).fetchall()
    assert [row[0] for row in untrusted] == ["execute"]
    assert trusted == allowed == []
    missing = TrustedCode(schemas=("public",), extensions=("tsm_system_rows", "no_such_extension"))
    with server.connect(HOSTILE_READER, database="clean") as conn:
        assert [row[0] for row in conn.execute(audit_sql(missing))] == ["extension"]
        run_guard(conn, missing)  # A missing extension is reported, never refused.


def test_a_call_is_refused_in_band_while_the_role_may_run_untrusted_code(
    scratch: PostgresServer,
) -> None:
    settings = Settings(
        sql_dsn=SecretStr(scratch.dsn(HOSTILE_READER)), sql_schemas=("public",), sql_pool_max_size=1
    )

    async def main() -> tuple[ToolFailure, int]:
        tool = SQLTool(settings)
        try:
            first = await tool.run(ReadOnlySQLParams(query="SELECT count(*) FROM notes"))
            # Code appears after the connection was set up: the guard in the call's own
            # transaction refuses, and the audit that follows names it.
            _as_owner(
                scratch,
                "CREATE FUNCTION v.late() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                "GRANT EXECUTE ON FUNCTION v.late() TO PUBLIC",
            )
            with pytest.raises(ToolFailure) as caught:
                await tool.run(ReadOnlySQLParams(query="SELECT count(*) FROM notes"))
            _as_owner(scratch, "REVOKE EXECUTE ON FUNCTION v.late() FROM PUBLIC")
            # Fixed, the same connection serves again at once.
            again = await tool.run(ReadOnlySQLParams(query="SELECT count(*) FROM notes"))
            assert again.rows == first.rows
            return caught.value, int(str(first.rows[0][0]))
        finally:
            await tool.aclose()

    failure, count = asyncio.run(main())
    assert count == 100
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert "v.late()" in failure.problem.detail
    assert "REVOKE EXECUTE ON FUNCTION v.late() FROM PUBLIC" in failure.problem.detail


def test_a_refusal_names_at_most_three_problems_within_the_detail_bound() -> None:
    problems = [
        RoleProblem("execute", f"the role may execute f{i}() " + "x" * 300, "REVOKE")
        for i in range(9)
    ]
    failure = refusal(problems)
    assert "(and 6 more: run mcp-server-suite --check-config)" in failure.problem.detail or (
        failure.problem.detail.endswith("(run mcp-server-suite --check-config)")
    )
    assert len(failure.problem.detail) <= 1024
    assert failure.problem.metadata == {"role_problems": 9, "first_problem": "execute"}


def _check_config(
    server: PostgresServer, user: str, *extra: str, database: str = "app"
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env["MCP_SQL_DSN"] = server.dsn(user, database=database)
    # The clean database's one extension, whose function another test grants to PUBLIC.
    env["MCP_SQL_TRUSTED_EXTENSIONS"] = "tsm_system_rows"
    return subprocess.run(
        [sys.executable, "-m", "mcp_server_suite", "--check-config", *extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def _last_lines(run: subprocess.CompletedProcess[str]) -> list[str]:
    # What --check-config printed after the configuration's own lines.
    lines = run.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(("database:", "warning:")))
    return lines[first:]


def test_check_config_says_what_it_checked_with_the_verdict_last(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    with server.connect() as conn:
        version = conn.info.server_version
    shown = f"PostgreSQL {version // 10000}.{version % 10000}"
    clean = _check_config(server, HOSTILE_READER, database=CLEAN_DATABASE)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.splitlines()[0] == "configuration:"
    assert _last_lines(clean) == [
        f"database: connected to {shown} as {HOSTILE_READER} on the database clean; "
        "role audit: no problem",
        "verdict: valid",
    ]
    # On the hostile database, the hardened role may not execute what the planted views call:
    # advice, which the server serves through, and which fails the check all the same.
    advised = _check_config(server, HOSTILE_READER)
    assert advised.returncode == 1
    lines = _last_lines(advised)
    assert all(" may not execute: " in line for line in lines[1:-1])
    assert lines[-1].startswith("verdict: needs attention: ")
    assert "(calls are served meanwhile)" in lines[-1]
    owner = _check_config(server, "mcp_rw")
    assert owner.returncode == 1
    lines = _last_lines(owner)
    problems = [line for line in lines if line.startswith("problem: ")]
    assert any("may create objects in the schema public" in line for line in problems)
    assert all("; fix: " in line for line in problems)
    assert lines[-1].startswith("verdict: invalid: read_only_sql and sql_schema refuse")
    superuser = _check_config(server, "postgres")
    assert superuser.returncode == 1
    lines = _last_lines(superuser)
    assert lines[0] == f"database: connected to {shown} as postgres on the database app; " + (
        "role audit: 1 problem"
    )
    assert lines[1].startswith("problem: read_only_sql: the role postgres is a superuser")
    assert [line for line in lines if line.startswith("problem: ")] == [lines[1]]
    assert "fix: REVOKE" not in superuser.stdout
    missing = _check_config(server, "no_such_role")
    assert missing.returncode == 1
    assert _last_lines(missing)[0].startswith("database: cannot connect: ")
    assert _last_lines(missing)[-1].startswith("verdict: invalid: ")
    offline = _check_config(server, "no_such_role", "--offline")
    assert offline.returncode == 0
    assert _last_lines(offline) == [
        "database: not contacted (--offline), so the SQL tools' role was not audited",
        "verdict: valid offline; run without --offline to audit the role",
    ]


def test_audit_database_reports_a_refused_login(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    audit = audit_database(server.dsn("no_such_role"), TRUSTED, connect_timeout=2)
    assert audit.server is None
    assert audit.problems == ()
    assert audit.error is not None
    assert "no_such_role" in audit.error


def test_the_guard_skips_its_checks_only_under_the_snapshot_it_passed_under(
    scratch: PostgresServer,
) -> None:
    _as_owner(scratch, "CREATE FUNCTION v.g() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    with scratch.connect(PROBE_ROLE) as conn:
        passed = run_guard(conn, TRUSTED)
        assert run_guard(conn, TRUSTED, passed) == passed
    # Any commit since (here: a grant that makes the role able to run planted code) changes
    # the snapshot, so the checks run again and fail.
    _as_owner(scratch, f"GRANT EXECUTE ON FUNCTION v.g() TO {PROBE_ROLE}")
    with scratch.connect(PROBE_ROLE) as conn, pytest.raises(psycopg.Error) as caught:
        run_guard(conn, TRUSTED, passed)
    assert caught.value.sqlstate == GUARD_SQLSTATE


def test_the_guards_short_form_passes_only_while_the_snapshot_holds(
    scratch: PostgresServer,
) -> None:
    _as_owner(scratch, "CREATE FUNCTION v.h() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    with scratch.connect(PROBE_ROLE) as conn:
        conn.execute(f"PREPARE probe_unchanged(pg_catalog.text) AS {UNCHANGED_GUARD}")
        passed = run_guard(conn, TRUSTED)
        row = conn.execute(
            psycopg.sql.SQL("EXECUTE probe_unchanged({})").format(psycopg.sql.Literal(passed))
        ).fetchone()
        assert row == (passed, 1)
        # Any commit since (a grant that lets the role run planted code) moves the snapshot,
        # and the short form fails as the full guard does, whatever it was given.
        _as_owner(scratch, f"GRANT EXECUTE ON FUNCTION v.h() TO {PROBE_ROLE}")
        for given in (passed, "", "1:1:"):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(
                    psycopg.sql.SQL("EXECUTE probe_unchanged({})").format(
                        psycopg.sql.Literal(given)
                    )
                )
            assert caught.value.sqlstate == GUARD_SQLSTATE


def _recording_guards(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    # Records which form of the guard each round trip sends: "full" or "short".
    from mcp_server_suite.tools.sql import session

    sent: list[str] = []
    original = session._guard_statement

    def recording(last: str, *, unchanged: bool) -> Any:
        sent.append("short" if unchanged else "full")
        return original(last, unchanged=unchanged)

    monkeypatch.setattr(session, "_guard_statement", recording)
    return sent


def _reader_tool(server: PostgresServer) -> SQLTool:
    return SQLTool(
        Settings(
            sql_dsn=SecretStr(server.dsn(HOSTILE_READER)),
            sql_schemas=("public",),
            sql_pool_max_size=1,
        )
    )


def test_code_that_appears_on_a_quiet_cluster_is_refused_by_the_full_guard(
    scratch: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _recording_guards(monkeypatch)
    counting = ReadOnlySQLParams(query="SELECT count(*) FROM notes")

    async def main() -> ToolFailure:
        tool = _reader_tool(scratch)
        try:
            # The first call runs the checks; the second finds the snapshot unchanged, so the
            # third sends the short form.
            for _ in range(3):
                await tool.run(counting)
            assert sent == ["full", "full", "short"]
            _as_owner(
                scratch,
                "CREATE FUNCTION v.quiet() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                "GRANT EXECUTE ON FUNCTION v.quiet() TO PUBLIC",
            )
            with pytest.raises(ToolFailure) as caught:
                await tool.run(counting)
            # The short form failed, and the full guard, in a second round trip, refused.
            assert sent[3:] == ["short", "full"]
            _as_owner(scratch, "REVOKE EXECUTE ON FUNCTION v.quiet() FROM PUBLIC")
            await tool.run(counting)
            return caught.value
        finally:
            await tool.aclose()

    failure = asyncio.run(main())
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert "v.quiet()" in failure.problem.detail


def test_a_busy_cluster_gets_the_full_guard_in_one_round_trip(
    scratch: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _recording_guards(monkeypatch)
    counting = ReadOnlySQLParams(query="SELECT count(*) FROM notes")

    async def main() -> list[object]:
        tool = _reader_tool(scratch)
        try:
            for _ in range(2):
                await tool.run(counting)
            rows: list[object] = []
            for _ in range(4):
                # Another session commits a transaction between every two calls.
                with scratch.connect() as superuser:
                    superuser.execute("SELECT pg_catalog.txid_current()")
                rows.append((await tool.run(counting)).rows[0])
            # Quiet again: the full guard finds the snapshot unchanged, then the short form.
            await tool.run(counting)
            await tool.run(counting)
            return rows
        finally:
            await tool.aclose()

    rows = asyncio.run(main())
    assert rows == [[100]] * 4
    # One short form missed (and was followed by the full guard at once); the busy calls
    # after it sent the full guard alone, in one round trip each.
    assert sent == ["full", "full", "short", "full", "full", "full", "full", "full", "short"]


# --------------------------------------------------------------------------------------------
# Everything the role script removes is a problem (round 3)


def _fixed_by(problem: RoleProblem) -> str:
    # The statement a fix line leads with (fixes may offer another way after ", or").
    return problem.fix.split(", or ")[0]


@pytest.mark.parametrize("attribute", ["BYPASSRLS", "REPLICATION", "CREATEROLE", "CREATEDB"])
def test_each_special_attribute_is_a_problem_fixed_by_its_line(
    scratch: PostgresServer, attribute: str
) -> None:
    with scratch.connect() as conn:
        conn.execute(f"ALTER ROLE {PROBE_ROLE} {attribute}")
    found = [problem for problem in _problems(scratch) if problem.kind == "attribute"]
    assert [problem.fix for problem in found] == [f"ALTER ROLE {PROBE_ROLE} NO{attribute}"]
    assert attribute in found[0].subject
    assert _guard_fails(scratch)
    with scratch.connect() as conn:
        conn.execute(found[0].fix)
    assert [problem for problem in _problems(scratch) if problem.refuses] == []
    assert not _guard_fails(scratch)


def test_bypassrls_reads_what_row_level_security_hides(scratch: PostgresServer) -> None:
    # Why BYPASSRLS is a problem: the same plain SELECT sees the hidden rows.
    _as_owner(
        scratch,
        "CREATE TABLE v.secret(id int, public bool)",
        "INSERT INTO v.secret VALUES (1, true), (2, false)",
        "ALTER TABLE v.secret ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY shown ON v.secret USING (public)",
        f"GRANT SELECT ON v.secret TO {PROBE_ROLE}",
    )
    counting = "SELECT count(*) FROM v.secret"
    with scratch.connect(PROBE_ROLE) as conn:
        assert conn.execute(counting).fetchone() == (1,)
    with scratch.connect() as conn:
        conn.execute(f"ALTER ROLE {PROBE_ROLE} BYPASSRLS")
    with scratch.connect(PROBE_ROLE) as conn:
        assert conn.execute(counting).fetchone() == (2,)
    assert _guard_fails(scratch)


def test_membership_in_any_role_is_a_problem_even_without_inherit(scratch: PostgresServer) -> None:
    with scratch.connect() as conn:
        conn.execute("CREATE ROLE audit_granter CREATEROLE")
        conn.execute(f"GRANT audit_owner TO {PROBE_ROLE}")
        conn.execute("GRANT audit_owner TO audit_granter WITH ADMIN OPTION")
    try:
        with scratch.connect() as conn:
            conn.execute("SET ROLE audit_granter")
            conn.execute(f"GRANT audit_owner TO {PROBE_ROLE}")
        with scratch.connect(PROBE_ROLE) as conn:
            # NOINHERIT does not stop the role from taking the other role on.
            conn.execute("SELECT pg_catalog.set_config('role', 'audit_owner', false)")
            assert conn.execute("SELECT current_user").fetchone() == ("audit_owner",)
        found = [problem for problem in _problems(scratch) if problem.kind == "membership"]
        assert found
        assert all("audit_owner" in problem.subject for problem in found)
        assert _guard_fails(scratch)
        with scratch.connect() as conn:
            for problem in found:
                conn.execute(problem.fix)
        assert [problem for problem in _problems(scratch) if problem.refuses] == []
        assert not _guard_fails(scratch)
    finally:
        with scratch.connect() as conn:
            conn.execute("DROP ROLE audit_granter")


def test_owning_the_database_is_a_problem(scratch: PostgresServer) -> None:
    with scratch.connect() as conn:
        owner = conn.execute(
            "SELECT datdba::regrole::text FROM pg_database WHERE datname = 'app'"
        ).fetchone()
        assert owner is not None
        conn.execute(f"ALTER DATABASE app OWNER TO {PROBE_ROLE}")
    try:
        found = [problem for problem in _problems(scratch) if problem.kind == "membership"]
        assert [problem.fix for problem in found] == ["ALTER DATABASE app OWNER TO another role"]
        assert _guard_fails(scratch)
    finally:
        with scratch.connect() as conn:
            conn.execute(f"ALTER DATABASE app OWNER TO {owner[0]}")


def test_a_superuser_is_one_problem_that_no_revoke_can_fix(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    found = _problems(server, "postgres")
    assert [problem.kind for problem in found] == ["superuser"]
    assert "REVOKE" not in found[0].fix
    assert "scripts/least-privilege-role.sql" in found[0].fix


# Expressions of a view, a policy or a domain CHECK that reach a built-in acting outside the
# transaction, one per kind of node that names a function or an operator. `v.###` is a
# prefix operator on pg_cancel_backend(integer); `v.=` and `v.#=#` are pg_terminate_backend
# (integer, bigint), found before pg_catalog's by the owner's search_path.
_OPERATORS: Final = (
    "CREATE OPERATOR v.### (RIGHTARG = integer, FUNCTION = pg_catalog.pg_cancel_backend)",
    "CREATE OPERATOR v.#=# (LEFTARG = integer, RIGHTARG = bigint, "
    "FUNCTION = pg_catalog.pg_terminate_backend)",
    "CREATE OPERATOR v.= (LEFTARG = integer, RIGHTARG = bigint, "
    "FUNCTION = pg_catalog.pg_terminate_backend)",
)
_ROUTES: Final = {
    "a call by name": "pg_catalog.pg_cancel_backend(id)",
    "a prefix operator": "OPERATOR(v.###) id",
    "an infix operator": "id OPERATOR(v.#=#) 0::bigint",
    "IS DISTINCT FROM": "id IS DISTINCT FROM 0::bigint",
    "NULLIF": "NULLIF(id, 0::bigint) IS NULL",
    "= ANY": "id = ANY (ARRAY[0::bigint])",
}


@pytest.mark.parametrize("route", sorted(_ROUTES))
@pytest.mark.parametrize("holder", ["view", "policy", "domain"])
def test_a_stored_expression_reaching_an_escaping_built_in_is_found_by_any_route(
    scratch: PostgresServer, route: str, holder: str
) -> None:
    expression = _ROUTES[route]
    plant = {
        "view": (f"CREATE VIEW v.stored AS SELECT {expression} AS x FROM v.base",),  # noqa: S608
        "policy": (
            "ALTER TABLE v.base ENABLE ROW LEVEL SECURITY",
            f"CREATE POLICY stored ON v.base USING (({expression}) IS NOT NULL)",
        ),
        "domain": (
            "CREATE DOMAIN v.stored AS integer CHECK "
            f"((({expression.replace('id', 'VALUE')})) IS NOT NULL)",
        ),
    }[holder]
    built_ins = (
        "pg_catalog.pg_cancel_backend(integer)",
        "pg_catalog.pg_terminate_backend(integer, bigint)",
    )
    with scratch.connect() as conn:
        # The owner needs EXECUTE to define an operator on a function.
        for function in built_ins:
            conn.execute(f"GRANT EXECUTE ON FUNCTION {function} TO audit_owner")
    _as_owner(
        scratch,
        "SET search_path = v, pg_catalog",
        "CREATE TABLE v.base(id integer)",
        *_OPERATORS,
        *plant,
    )
    trusted = TrustedCode(schemas=("public", "v"))
    # A role that may not execute the built-in is no problem: the expression fails instead.
    assert [p for p in _problems(scratch, trusted=trusted) if p.refuses] == []
    with scratch.connect() as conn:
        for function in built_ins:
            conn.execute(f"GRANT EXECUTE ON FUNCTION {function} TO PUBLIC")
    try:
        found = _problems(scratch, trusted=trusted)
        stored = [p for p in found if p.kind == "stored"]
        assert len(stored) == 1, stored
        assert "backend" in stored[0].subject
        assert stored[0].fix.startswith("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_")
        # The operators themselves run the built-ins, wherever they are used.
        assert len([p for p in found if p.kind == "operator"]) == len(_OPERATORS)
        assert _guard_fails(scratch)
    finally:
        with scratch.connect() as conn:
            for function in built_ins:
                conn.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC, audit_owner")


def test_the_audit_reads_every_field_of_a_stored_tree_that_names_code(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    # The system views of this server's major use most kinds of expression node. Every field
    # of their stored trees that holds a function's or an operator's object id must be one
    # the audit reads, or one reviewed as naming something else: a new field in a later
    # major fails here until it is reviewed.
    from mcp_server_suite.tools.sql import role_audit

    server, _ = hostile_server
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT DISTINCT m[1] FROM pg_rewrite r, "
            "regexp_matches(r.ev_action::text, ':([A-Za-z_]+) ([0-9]+) ', 'g') m "
            "WHERE m[2]::oid IN (SELECT oid FROM pg_proc UNION ALL SELECT oid FROM pg_operator)"
        ).fetchall()
    fields = {str(row[0]) for row in rows}
    read = set(role_audit._FUNCTION_FIELDS.split("|")) | set(role_audit._OPERATOR_FIELDS.split("|"))
    # Fields whose numbers are positions, counts, lengths or enumerations, not object ids,
    # though they may equal a function's or an operator's by chance (seen on 15 and 18).
    other = {
        "constlen", "constvalue", "fieldnum", "frameOptions", "funccolcount", "funcformat",
        "location", "paramid", "perminfoindex", "resno", "resorigcol", "ressortgroupref",
        "rtekind", "stmt_location", "tleSortGroupRef", "varattno", "varattnosyn", "varno",
        "varnosyn",
    }  # fmt: skip
    assert fields & read >= {"funcid", "opfuncid", "opno", "aggfnoid", "winfnoid", "eqop"}
    assert fields - read - other == set()


# Trees as PostgreSQL writes them, one field each; 2096 is the flagged function and 16395 an
# operator that runs it, 97 and 20960 are neither.
_TREES: Final = {
    "{FUNCEXPR :funcid 2096 :funcresulttype 16": True,
    "{FUNCEXPR :funcid 20960 :funcresulttype 16": False,
    "{OPEXPR :opno 16395 :opfuncid 0 :opresulttype 16": True,
    "{OPEXPR :opno 97 :opfuncid 2096 :opresulttype 16": True,
    "{DISTINCTEXPR :opno 16395 :opfuncid 2096 :opresulttype 16": True,
    "{NULLIFEXPR :opno 97 :opfuncid 66 :opresulttype 16": False,
    "{SCALARARRAYOPEXPR :opno 97 :opfuncid 66 :hashfuncid 2096 :negfuncid 0": True,
    "{SCALARARRAYOPEXPR :opno 97 :opfuncid 66 :hashfuncid 0 :negfuncid 2096 :useOr": True,
    "{AGGREF :aggfnoid 2096 :aggtype 16": True,
    "{WINDOWFUNC :winfnoid 2096 :wintype 16": True,
    "{SORTGROUPCLAUSE :tleSortGroupRef 1 :eqop 16395 :sortop 97 :nulls_first": True,
    "{SORTGROUPCLAUSE :tleSortGroupRef 1 :eqop 97 :sortop 16395 :nulls_first": True,
    "{ROWCOMPAREEXPR :rctype 1 :opnos (o 97 16395) :opfamilies (o 1976 1976)": True,
    "{ROWCOMPAREEXPR :rctype 1 :opnos (o 97 116395) :opfamilies (o 1976 1976)": False,
    "{CONST :consttype 23 :constlen 4 :constvalue 4 [ 48 8 0 0 0 0 0 0 ]": False,
}


def test_the_pattern_finds_a_flagged_function_in_every_field_that_names_code(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    from mcp_server_suite.tools.sql import role_audit

    server, _ = hostile_server
    pattern = role_audit._REACHES.format(
        functions=role_audit._FUNCTION_FIELDS, operators=role_audit._OPERATOR_FIELDS
    )
    with server.connect() as conn:
        for tree, expected in _TREES.items():
            row = conn.execute(
                "WITH flagged(oid) AS (VALUES (2096::oid)), "
                "flagged_operators(oid) AS (VALUES (16395::oid)) "
                f"SELECT %s ~ {pattern}",
                (tree + " :x",),
            ).fetchone()
            assert row == (expected,), tree
