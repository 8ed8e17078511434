"""Defence in depth: each layer of `read_only_sql` holds on its own.

1. The policy alone. Its output runs as the superuser, outside any read-only transaction,
   with no role limits: every `reject` case of the corpus must be refused before it runs.
2. The read-only transaction alone. With the policy switched off, the superuser runs
   statements through the tool's execution path (`BEGIN READ ONLY`, the statement over the
   extended protocol, always rolled back): every write must fail.
3. The least-privilege role alone. `mcp_reader` runs statements on a plain connection: no
   policy, no explicit read-only transaction, and its read-only default switched off. What the
   design document says the role refuses must be refused.

After each layer's test the database is unchanged. What a layer does not stop (advisory locks
outlive a rolled-back transaction; a superuser's session can reach server files) is stated in
tests too, so that the layer responsible for it is on record.
"""

import asyncio
import json
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.policy import FunctionPolicy
from mcp_server_suite.tools.sql.session import FetchedRows, fetch_read_only
from mcp_server_suite.tools.sql.statement import RelationCatalog, render_statement
from mcp_server_suite.tools.sql.tool import check_untrusted_sql
from mcp_server_suite.tools.sql.values import make_adapters
from tests.support.postgres import READER_ROLE, PostgresServer, database_state

VECTORS: Final = Path(__file__).resolve().parents[1] / "vectors"
CASES: Final[list[dict[str, Any]]] = json.loads((VECTORS / "sql.json").read_text("utf-8"))
# SQL-241 is two plain literals under the pinned standard_conforming_strings = on
# (test_sql_corpus.py says why it runs); the session refuses any connection where it is off.
# SQL-241 runs and SQL-178 (lpad to 1 GB) is left to PostgreSQL's own bound on one value
# since issue 19 (test_sql_corpus.SPEC_OVERRIDES says why).
REJECT_CASES: Final = [
    case
    for case in CASES
    if case["expect"] == "reject" and case["id"] not in ("SQL-241", "SQL-178")
]


# --- 1. The policy alone --------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("standard_strings", ["on"])
def test_policy_alone_refuses_every_reject_case(
    postgres_server: PostgresServer, standard_strings: str
) -> None:
    before = database_state(postgres_server)
    ran: list[str] = []
    codes: set[MCPErrorCode] = set()
    with postgres_server.connect() as superuser:
        # The most permissive session there is: superuser, autocommit, no read-only default,
        # and (in one run) the lexer setting that turns SQL-241 into a call of pg_sleep.
        superuser.execute(f"SET standard_conforming_strings = {standard_strings}")
        superuser.execute("SET statement_timeout = '5s'")
        for case in REJECT_CASES:
            text = case["payload"].replace("<socket-dir>", str(postgres_server.socket_dir))
            try:
                tree = check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
                executed = render_statement(
                    tree, RelationCatalog(("public",), []), max_rows=50, max_result_bytes=65_536
                )
            except ToolFailure as failure:
                codes.add(failure.problem.code)
                continue
            ran.append(case["id"])
            superuser.execute(executed.sql)
    assert ran == []
    assert codes <= {MCPErrorCode.QUERY_VIOLATION, MCPErrorCode.VALIDATION_ERROR}
    after = database_state(postgres_server)
    assert after == before


# --- 2. The read-only transaction alone -------------------------------------------------------

# Writes, each reached without the policy: through functions, views, operators, casts,
# attribute notation, sequences, large objects, SQL in strings, data-modifying CTEs and row locks.
WRITES: Final = [
    "SELECT evil()",
    "SELECT evil_definer()",
    "SELECT evil_sql()",
    "SELECT * FROM v_evil",
    "SELECT t.leak FROM t LIMIT 1",
    "SELECT 1 OPERATOR(public.#+#) 2",
    "SELECT 1::public.mood",
    "SELECT public.lower('x')",
    "SELECT nextval('s')",
    "SELECT setval('s', 100)",
    "SELECT lo_create(0)",
    "SELECT lo_from_bytea(0, 'x')",
    "SELECT lo_unlink(4242)",
    "SELECT query_to_xml('insert into audit(msg) values (''qx'') returning 1', true, false, '')",
    "SELECT * FROM t WHERE id = 1 FOR UPDATE",
    "WITH d AS (DELETE FROM victim RETURNING *) SELECT * FROM d",
    "WITH d AS (INSERT INTO audit(msg) VALUES ('cte') RETURNING *) SELECT * FROM d",
    "SELECT * INTO TEMP tmp_x FROM t",
    "SELECT 1; DELETE FROM victim",
    "SELECT 1; COMMIT; DROP TABLE victim",
]


async def _superuser_fetch(server: PostgresServer, statement: str) -> FetchedRows:
    conn = await psycopg.AsyncConnection.connect(
        server.superuser_dsn, autocommit=True, context=make_adapters()
    )
    try:
        return await fetch_read_only(
            conn, statement, max_rows=5, statement_timeout_ms=5000, client_timeout=10
        )
    finally:
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        await conn.close()


# Writes that older PostgreSQL releases allow inside a read-only transaction: large objects.
# The unconditional rollback undoes them; PostgreSQL 18, and the later minor releases of some
# older majors, refuse them themselves (25006). Which a server does is asked of the server
# (`_refuses_large_object_writes_read_only`), not read off its version number.
UNDONE_BY_ROLLBACK: Final = frozenset(
    {"SELECT lo_create(0)", "SELECT lo_from_bytea(0, 'x')", "SELECT lo_unlink(4242)"}
)


def _refuses_large_object_writes_read_only(server: PostgresServer) -> bool:
    # A large object created in a read-only transaction that is rolled back in any case: the
    # server either refuses it (25006) or creates it, and the rollback undoes it.
    with server.connect() as conn, conn.transaction(force_rollback=True):
        conn.execute("SET TRANSACTION READ ONLY")
        try:
            conn.execute("SELECT lo_create(0)")
        except psycopg.errors.ReadOnlySqlTransaction:
            return True
        return False


@pytest.mark.postgres
def test_read_only_transaction_alone_stops_every_write(postgres_server: PostgresServer) -> None:
    before = database_state(postgres_server)
    outcomes: dict[str, str] = {}
    for statement in WRITES:
        try:
            asyncio.run(_superuser_fetch(postgres_server, statement))
        except ToolFailure as failure:
            # 25006: refused by the read-only transaction; 0A000: refused inside query_to_xml,
            # which runs its query read-only; 42601: refused by the extended protocol, which
            # accepts one statement only.
            outcomes[statement] = str(failure.problem.metadata["sqlstate"])
        else:
            outcomes[statement] = "rolled back"
        # Nothing survives, statement by statement.
        after = database_state(postgres_server)
        assert (after.tables, after.large_objects, after.sequences) == (
            before.tables,
            before.large_objects,
            before.sequences,
        ), statement
    refused = _refuses_large_object_writes_read_only(postgres_server)
    undone = {s for s, outcome in outcomes.items() if outcome == "rolled back"}
    assert undone == (set() if refused else UNDONE_BY_ROLLBACK)
    # The large-object writes did take transaction ids before the rollback: keeping every
    # xid is the policy's job (test_sql_corpus), not this layer's.
    assert set(outcomes.values()) <= {"25006", "0A000", "42601", "rolled back"}


@pytest.mark.postgres
def test_what_the_read_only_transaction_does_not_stop(postgres_server: PostgresServer) -> None:
    # Session-level advisory locks are taken inside a read-only transaction and survive its
    # rollback: the policy refuses them, and the pool's reset releases any that appear.
    async def body() -> int:
        conn = await psycopg.AsyncConnection.connect(
            postgres_server.superuser_dsn, autocommit=True, context=make_adapters()
        )
        try:
            await fetch_read_only(
                conn,
                "SELECT pg_advisory_lock(4711)",
                max_rows=1,
                statement_timeout_ms=5000,
                client_timeout=10,
            )
            return database_state(postgres_server).advisory_locks
        finally:
            await conn.close()

    assert asyncio.run(body()) == 1
    assert database_state(postgres_server).advisory_locks == 0
    with pytest.raises(ToolFailure):
        check_untrusted_sql(
            "SELECT pg_advisory_lock(4711)", functions=FunctionPolicy(), schemas=("public",)
        )


# --- 3. The least-privilege role alone ---------------------------------------------------------

# Statements the role must refuse on its own, with the SQLSTATE it refuses them with. The
# session first switches its read-only default off, so the privileges alone decide.
ROLE_REFUSALS: Final = [
    ("INSERT INTO t VALUES (1000, 'x', 'y')", "42501"),
    ("UPDATE t SET name = 'x'", "42501"),
    ("DELETE FROM t", "42501"),
    ("TRUNCATE victim", "42501"),
    ("DROP TABLE victim", "42501"),
    ("ALTER TABLE t ADD COLUMN c int", "42501"),
    ("CREATE TABLE public.made_by_reader (a int)", "42501"),
    ("CREATE SCHEMA reader_schema", "42501"),
    ("SELECT * FROM private", "42501"),
    ("SELECT * FROM audit", "42501"),
    ("SELECT rolname, rolpassword FROM pg_authid", "42501"),
    ("SELECT * FROM pg_hba_file_rules", "42501"),
    ("SELECT pg_read_file('/etc/passwd')", "42501"),
    ("SELECT pg_read_binary_file('/etc/passwd')", "42501"),
    ("SELECT * FROM pg_ls_dir('.')", "42501"),
    ("SELECT lo_import('/etc/hostname')", "42501"),
    ("SELECT lo_create(0)", "42501"),
    ("SELECT lo_from_bytea(0, 'x')", "42501"),
    ("COPY t TO '/tmp/mcp_reader_copy'", "42501"),
    ("COPY t TO PROGRAM 'true'", "42501"),
    ("SELECT pg_stat_reset()", "42501"),
    ("SELECT pg_logical_emit_message(false, 'p', 'x')", "42501"),
    ("SELECT set_config('role', 'postgres', false)", "42501"),
    ("SET ROLE postgres", "42501"),
    ("SET SESSION AUTHORIZATION postgres", "42501"),
    ("ALTER ROLE mcp_reader SUPERUSER", "42501"),
    ("CHECKPOINT", "42501"),
    ("SELECT pg_reload_conf()", "42501"),
    ("GRANT SELECT ON private TO mcp_reader", "42501"),
]


@pytest.mark.postgres
def test_role_alone_refuses_what_the_design_says(postgres_server: PostgresServer) -> None:
    before = database_state(postgres_server)
    outcomes: dict[str, str] = {}
    with postgres_server.connect(READER_ROLE) as conn:
        conn.execute("SET default_transaction_read_only = off")
        # The role's own search_path finds built-ins only; its privileges are under test.
        conn.execute("SET search_path = pg_catalog, public")
        for statement, _ in ROLE_REFUSALS:
            try:
                conn.execute(statement)
            except psycopg.Error as exc:
                outcomes[statement] = exc.sqlstate or "?"
            else:
                outcomes[statement] = "ran"
        # Other sessions' backends cannot be signalled (pg_signal_backend is never granted).
        with postgres_server.connect() as superuser:
            pid = superuser.pgconn.backend_pid
            try:
                conn.execute("SELECT pg_terminate_backend(%s)", [pid])
            except psycopg.Error as exc:
                outcomes["pg_terminate_backend"] = exc.sqlstate or "?"
        # dblink's functions are revoked from PUBLIC by the script's opt-in section (without
        # it, a role without a password still could not open a connection: 2F003).
        if postgres_server.has_dblink:
            try:
                conn.execute(
                    "SELECT dblink_connect('c1', %s)",
                    [f"dbname=app host={postgres_server.socket_dir}"],
                )
            except psycopg.Error as exc:
                outcomes["dblink_connect"] = exc.sqlstate or "?"
    expected = dict(ROLE_REFUSALS)
    expected["pg_terminate_backend"] = "42501"
    if postgres_server.has_dblink:
        expected["dblink_connect"] = "42501"
    assert outcomes == expected
    after = database_state(postgres_server)
    assert (after.tables, after.large_objects, after.sequences) == (
        before.tables,
        before.large_objects,
        before.sequences,
    )


@pytest.mark.postgres
def test_role_defaults_alone(postgres_server: PostgresServer) -> None:
    with postgres_server.connect(READER_ROLE) as conn:
        settings = conn.execute(
            "SELECT current_setting('default_transaction_read_only'), "
            "current_setting('lock_timeout'), "
            "current_setting('idle_in_transaction_session_timeout'), "
            "current_setting('standard_conforming_strings'), current_setting('search_path'), "
            "current_setting('temp_file_limit')"
        ).fetchone()
        assert settings == ("on", "1s", "15s", "on", "pg_catalog, pg_temp", "1GB")
        # The read-only default refuses a write the grants allow (PUBLIC may create
        # temporary tables).
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TEMP TABLE scratch (a int)")
        # The statement timeout ends a sleep.
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(10)")
        # The role's attributes, as the script sets them.
        row = conn.execute(
            "SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolreplication, "
            "rolbypassrls, rolconnlimit FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row == (False, False, False, False, False, False, 8)
        members = conn.execute(
            "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
            "WHERE r.rolname = current_user"
        ).fetchone()
        assert members == (0,)


@pytest.mark.postgres
def test_role_script_is_idempotent(postgres_server: PostgresServer) -> None:
    from tests.support.postgres import SUPERUSER

    script = Path(__file__).resolve().parents[2] / "scripts" / "least-privilege-role.sql"
    for _ in range(2):
        postgres_server.psql(
            "-v",
            "reader=mcp_script_check",
            "-v",
            "schema=public",
            "-v",
            f"owner={SUPERUSER}",
            "-f",
            str(script),
        )
    with postgres_server.connect() as conn:
        row = conn.execute(
            "SELECT rolconfig FROM pg_roles WHERE rolname = 'mcp_script_check'"
        ).fetchone()
        assert row is not None
        assert "default_transaction_read_only=on" in row[0]
        conn.execute("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM mcp_script_check")
        conn.execute("DROP OWNED BY mcp_script_check")
        conn.execute("DROP ROLE mcp_script_check")
