"""`read_only_sql` in real deployments: restarts, ended sessions, poolers, every condition.

- PostgreSQL restarted (fast and immediate), `idle_session_timeout` and
  `pg_terminate_backend` end the pool's idle sessions: the next calls all succeed, the dead
  connections found before use (`session.py`, Rule 8). These run on a cluster of their own,
  restarted for real.
- A session that ends before the call's BEGIN completes is sent once more; one that ended
  after it is not (`test_sql_tool.py` holds that a call terminated mid-query fails in-band).
- A pooler that hands one server session to several clients is detected, at start-up, in
  `--check-config` and in every call, in-band: through `txpool.TransactionPooler` (Python
  only) and through PgBouncer itself when it is installed (CI installs it).
- Every SQLSTATE psycopg knows becomes an in-band problem, never an internal error.
"""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import psycopg.errors
import pytest

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.schemas.errors import DeadlineExceeded, ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql import session
from mcp_server_suite.tools.sql.conditions import POOLING_ADVICE
from mcp_server_suite.tools.sql.deployment import (
    SUPERUSER_LINE,
    announce_deployment_problems,
    deployment_problems,
)
from mcp_server_suite.tools.sql.session import DatabaseUnavailable, translate_database_error
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import (
    PASSWORD_ROLE,
    READER_ROLE,
    PostgresServer,
    reader_settings,
    start_postgres,
    stop_postgres,
)
from tests.support.postgres_install import server_account
from tests.support.txpool import TransactionPooler

REPO: Final = Path(__file__).resolve().parents[2]
POOL_SIZE: Final = 4
# A query that holds its connection a little while, so that calls overlap and the pool grows.
OVERLAPPING: Final = "SELECT count(*) AS n FROM generate_series(1, 300000)"


@pytest.fixture(scope="module")
def own_server() -> Iterator[tuple[PostgresServer, Path]]:
    """A cluster of this module's own, which its tests restart."""
    try:
        server, base = start_postgres(log_statements=False)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server, base
    finally:
        stop_postgres(server, base)


def _as_server_account() -> dict[str, Any]:
    # PostgreSQL and PgBouncer refuse to run as root: as root, the suite runs them as the
    # account the fixture's cluster runs as, dropping to it in the child itself (no runuser,
    # which a PATH without /usr/sbin does not find), from a directory it can enter.
    account = server_account()
    if account is None:
        return {}
    return {"user": account.uid, "group": account.gid, "extra_groups": [], "cwd": "/"}


def _restart(server: PostgresServer, base: Path, mode: str) -> None:
    subprocess.run(
        [
            str(server.bindir / "pg_ctl"),
            "-D",
            str(base / "data"),
            "-l",
            str(server.log_file),
            "-m",
            mode,
            "-w",
            "-t",
            "60",
            "restart",
        ],
        check=True,
        capture_output=True,
        timeout=90,
        **_as_server_account(),
    )


def _reader_sessions(server: PostgresServer) -> int:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [READER_ROLE]
        ).fetchone()
        return int(row[0]) if row else 0


def _terminate_reader_sessions(server: PostgresServer) -> None:
    with server.connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            [READER_ROLE],
        )


async def _reader_sessions_ended(server: PostgresServer) -> None:
    # PostgreSQL ends a terminated session in its own time: wait for it, at most 10 s.
    for _ in range(200):
        if not _reader_sessions(server):
            return
        await asyncio.sleep(0.05)


async def _warm(tool: SQLTool) -> None:
    # Calls that overlap, so that the pool holds POOL_SIZE connections.
    for _ in range(3):
        await asyncio.gather(
            *(tool.run(ReadOnlySQLParams(query=OVERLAPPING)) for _ in range(POOL_SIZE))
        )


@pytest.mark.postgres
@pytest.mark.parametrize("event", ["fast", "immediate", "terminate", "idle_session_timeout"])
def test_sessions_postgres_ended_are_replaced_before_use(
    own_server: tuple[PostgresServer, Path], event: str
) -> None:
    server, base = own_server
    settings = reader_settings(server, sql_pool_max_size=POOL_SIZE, sql_connect_timeout=20.0)
    if event == "idle_session_timeout":
        with server.connect() as conn:
            conn.execute(f"ALTER ROLE {READER_ROLE} SET idle_session_timeout = '1s'")

    async def main() -> list[Any]:
        tool = SQLTool(settings)
        try:
            await _warm(tool)
            assert _reader_sessions(server) >= 2
            if event in ("fast", "immediate"):
                _restart(server, base, event)
            elif event == "terminate":
                _terminate_reader_sessions(server)
            # Every pooled session has ended before the next call.
            for _ in range(200):
                if event != "idle_session_timeout" and not _reader_sessions(server):
                    break
                await asyncio.sleep(0.05)
            return [
                (await tool.run(ReadOnlySQLParams(query=f"SELECT {n} AS n"))).rows
                for n in range(2 * POOL_SIZE)
            ]
        finally:
            await tool.aclose()

    try:
        assert asyncio.run(main()) == [[[n]] for n in range(2 * POOL_SIZE)]
    finally:
        if event == "idle_session_timeout":
            with server.connect() as conn:
                conn.execute(f"ALTER ROLE {READER_ROLE} RESET idle_session_timeout")


@pytest.mark.postgres
def test_a_session_that_ended_before_the_call_began_is_sent_again(
    own_server: tuple[PostgresServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = own_server
    settings = reader_settings(server, sql_pool_max_size=1)
    # The check before use is switched off, so the call is sent on the ended session.
    monkeypatch.setattr(session, "_closed_by_server", lambda conn: conn.closed)

    async def main() -> list[Any]:
        tool = SQLTool(settings)
        try:
            await tool.run(ReadOnlySQLParams(query="SELECT 1"))
            _terminate_reader_sessions(server)
            await _reader_sessions_ended(server)
            return (await tool.run(ReadOnlySQLParams(query="SELECT 2 AS two"))).rows
        finally:
            await tool.aclose()

    assert asyncio.run(main()) == [[2]]


# --- Poolers -------------------------------------------------------------------------------


def _outcomes(
    dsn: str, server: PostgresServer, calls: int = 6, query: str = OVERLAPPING
) -> list[object]:
    # Overlapping calls of `query` through `dsn`, then one alone: their results, or the
    # exceptions they raised.
    settings = reader_settings(server, sql_dsn=SecretStr(dsn), sql_pool_max_size=3)

    async def main() -> list[object]:
        tool = SQLTool(settings)
        try:
            outcomes: list[object] = []
            for _ in range(2):
                outcomes += await asyncio.gather(
                    *(tool.run(ReadOnlySQLParams(query=query)) for _ in range(calls)),
                    return_exceptions=True,
                )
            # Then one call alone, which a pool of one session would serve.
            outcomes += await asyncio.gather(
                tool.run(ReadOnlySQLParams(query=query)), return_exceptions=True
            )
            return outcomes
        finally:
            await tool.aclose()

    return asyncio.run(main())


def _assert_pooler_refused(outcomes: list[object]) -> None:
    # Every failure is the pooler's in-band problem; none is an internal error.
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert failures, "the shared session went unnoticed"
    # Once found, no call runs on any session of the pool.
    assert isinstance(outcomes[-1], BaseException)
    for failure in failures:
        assert isinstance(failure, ToolFailure), repr(failure)
        assert POOLING_ADVICE in failure.problem.detail
        assert failure.problem.metadata["cause"] == "configuration"


@pytest.fixture
def pooler(postgres_server: PostgresServer) -> Iterator[TransactionPooler]:
    """The Python transaction pooler in front of the suite's server, as the reader."""
    proxy = TransactionPooler(postgres_server.socket_dir, READER_ROLE, "app").start()
    try:
        yield proxy
    finally:
        proxy.stop()
        shutil.rmtree(proxy.socket_dir, ignore_errors=True)


@pytest.mark.postgres
def test_a_transaction_pooler_is_found_by_the_checks(pooler: TransactionPooler) -> None:
    problems, connected = deployment_problems(pooler.dsn(), connect_timeout=5)
    assert connected
    assert problems == [POOLING_ADVICE]


@pytest.mark.postgres
def test_a_transaction_pooler_is_refused_in_band(
    pooler: TransactionPooler, postgres_server: PostgresServer
) -> None:
    _assert_pooler_refused(_outcomes(pooler.dsn(), postgres_server))


@pytest.mark.postgres
def test_a_direct_connection_is_no_pooler(postgres_server: PostgresServer) -> None:
    assert deployment_problems(postgres_server.dsn(), connect_timeout=5) == ([], True)
    assert all(
        not isinstance(outcome, BaseException)
        for outcome in _outcomes(postgres_server.dsn(), postgres_server)
    )


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next(
        (str(p) for p in (Path("/usr/sbin/pgbouncer"),) if p.is_file()), None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install pgbouncer (.ci/run does)", pytrace=False)
        pytest.skip("pgbouncer is not installed (CI installs it; the Python pooler stands in)")
    return found


@contextlib.contextmanager
def _running_pgbouncer(server: PostgresServer, mode: str) -> Iterator[str]:
    # A PgBouncer on a Unix socket of its own in front of the suite's server; its DSN.
    binary = _pgbouncer()
    directory = Path("/tmp") / f"mcp-pgb-{os.getpid()}-{mode}"
    directory.mkdir(mode=0o755, exist_ok=True)
    port = 6_432 + (os.getpid() % 500)
    (directory / "users.txt").write_text(f'"{READER_ROLE}" ""\n', encoding="utf-8")
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"app = host={server.socket_dir} port=5432 dbname=app\n"
        "[pgbouncer]\n"
        "listen_addr =\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {directory}\n"
        "auth_type = trust\n"
        f"auth_file = {directory}/users.txt\n"
        f"pool_mode = {mode}\n"
        "default_pool_size = 3\n"
        f"logfile = {directory}/pgbouncer.log\n",
        encoding="utf-8",
    )
    account = server_account()
    if account is not None:
        for path in (directory, *directory.iterdir()):
            os.chown(path, account.uid, account.gid)
    process = subprocess.Popen(  # A fixed program and arguments.
        [binary, str(directory / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **_as_server_account(),
    )
    try:
        socket = directory / f".s.PGSQL.{port}"
        for _ in range(200):
            if socket.exists():
                break
            time.sleep(0.05)
        yield f"postgresql://{READER_ROLE}@/app?host={directory}&port={port}"
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.postgres
def test_pgbouncer_in_transaction_mode_is_found_and_refused(
    postgres_server: PostgresServer,
) -> None:
    with _running_pgbouncer(postgres_server, "transaction") as dsn:
        assert deployment_problems(dsn, connect_timeout=5) == ([POOLING_ADVICE], True)
        _assert_pooler_refused(_outcomes(dsn, postgres_server))


@pytest.mark.postgres
def test_pgbouncer_in_session_mode_serves_every_call(postgres_server: PostgresServer) -> None:
    with _running_pgbouncer(postgres_server, "session") as dsn:
        assert deployment_problems(dsn, connect_timeout=5) == ([], True)
        outcomes = _outcomes(dsn, postgres_server, calls=3)
        assert all(not isinstance(outcome, BaseException) for outcome in outcomes), outcomes


# --- At start-up and in --check-config -------------------------------------------------------


def _server_env(dsn: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "MCP_SQL_DSN": dsn,
        "MCP_METRICS_ENABLED": "false",
    }


def _start_up_line(dsn: str) -> str:
    # The first warning a server started with `dsn` writes on stderr, while its client
    # waits without sending anything.
    with subprocess.Popen(
        [sys.executable, "-m", "mcp_server_suite"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_server_env(dsn),
        cwd=REPO,
    ) as process:
        assert process.stderr is not None
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                line = process.stderr.readline().decode()
                if " WARNING " in line:
                    return line
            raise AssertionError("no warning on stderr")
        finally:
            process.kill()


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["password", "superuser", "unreachable"])
def test_a_dsn_every_call_would_fail_on_is_said_at_start_up(
    postgres_server: PostgresServer, case: str
) -> None:
    secret = "never-shown-" + os.urandom(4).hex()
    dsn = {
        "password": postgres_server.dsn(PASSWORD_ROLE, password=secret),
        "superuser": postgres_server.superuser_dsn,
        "unreachable": f"postgresql://{READER_ROLE}@/app?host={postgres_server.socket_dir}-x",
    }[case]
    line = _start_up_line(dsn)
    assert line.count("\n") == 1
    assert "read_only_sql: " in line
    assert secret not in line
    assert {
        "password": "SQLSTATE 28P01",
        "superuser": SUPERUSER_LINE,
        "unreachable": "could not be reached",
    }[case] in line


@pytest.mark.postgres
def test_check_config_names_the_pooler(pooler: TransactionPooler) -> None:
    result = subprocess.run(  # This interpreter, this package.
        [sys.executable, "-m", "mcp_server_suite", "--check-config"],
        env=_server_env(pooler.dsn()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert result.returncode != 0
    assert f"problem: read_only_sql: {POOLING_ADVICE}" in result.stdout.splitlines()


@pytest.mark.postgres
def test_the_start_up_check_is_silent_for_a_sound_dsn(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"):
        thread = announce_deployment_problems(reader_settings(postgres_server))
        assert thread is not None
        thread.join(60)
    assert not thread.is_alive()
    assert caplog.text == ""


# --- Every condition -------------------------------------------------------------------------


def _every_sqlstate() -> list[type[psycopg.Error]]:
    classes = {
        cls
        for name in dir(psycopg.errors)
        if isinstance(cls := getattr(psycopg.errors, name), type)
        and issubclass(cls, psycopg.Error)
        and getattr(cls, "sqlstate", None)
    }
    return sorted(classes, key=lambda cls: str(cls.sqlstate))


def test_every_sqlstate_is_an_in_band_problem() -> None:
    errors = _every_sqlstate()
    # psycopg knows every code of PostgreSQL's errcodes.txt: some 260.
    assert len(errors) > 200
    for error in errors:
        translated = translate_database_error(error("message"), 1000)
        assert not isinstance(translated, DatabaseUnavailable), error.sqlstate
        assert isinstance(translated, ToolFailure), error.sqlstate
        if isinstance(translated, DeadlineExceeded):
            continue
        assert translated.problem.metadata["sqlstate"] == error.sqlstate
        assert f"(SQLSTATE {error.sqlstate})" in translated.problem.detail


@pytest.mark.parametrize(
    ("sqlstate", "message", "code", "cause", "retryable"),
    [
        ("40001", "canceling statement due to conflict with recovery", "INTERNAL_ERROR",
         "database", True),
        ("40P01", "deadlock detected", "INTERNAL_ERROR", "database", True),
        ("55000", 'materialized view "m" has not been populated', "INTERNAL_ERROR",
         "database", None),
        ("55000", 'currval of sequence "s" is not yet defined', "VALIDATION_ERROR", None, None),
        ("3F000", 'schema "nosuch" does not exist', "VALIDATION_ERROR", None, None),
        ("57P01", "terminating connection due to administrator command", "INTERNAL_ERROR",
         "connection", True),
        ("57P05", "terminating connection due to idle-session timeout", "INTERNAL_ERROR",
         "connection", True),
        ("53300", "too many connections for role", "INTERNAL_ERROR", "database", True),
        ("28P01", "password authentication failed", "INTERNAL_ERROR", "configuration", None),
        ("26000", 'prepared statement "mcp_guard" does not exist', "INTERNAL_ERROR",
         "configuration", None),
        ("XX000", "could not open relation", "INTERNAL_ERROR", "database", None),
        ("ZZ999", "a class PostgreSQL adds later", "INTERNAL_ERROR", "database", None),
    ],
)  # fmt: skip
def test_conditions_say_whose_they_are(
    sqlstate: str, message: str, code: str, cause: str | None, retryable: bool | None
) -> None:
    from mcp_server_suite.tools.sql.conditions import condition_failure

    failure = condition_failure(sqlstate, message, statement_timeout_ms=1000)
    assert failure.problem.code is MCPErrorCode[code]
    assert failure.problem.metadata.get("cause") == cause
    assert failure.problem.metadata.get("retryable") == retryable


@pytest.mark.postgres
def test_an_unpopulated_materialized_view_is_the_databases_condition(
    own_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = own_server
    with server.connect() as conn:
        conn.execute("CREATE MATERIALIZED VIEW public.mcp_unready AS SELECT 1 AS x WITH NO DATA")
        conn.execute(f"GRANT SELECT ON public.mcp_unready TO {READER_ROLE}")

    (failure,) = _outcomes(server.dsn(), server, 1, "SELECT * FROM mcp_unready")[-1:]
    assert isinstance(failure, ToolFailure)
    assert failure.problem.metadata == {"sqlstate": "55000", "cause": "database"}
    assert "REFRESH MATERIALIZED VIEW" in failure.problem.detail


# --- The edges of the checks and the pool ----------------------------------------------------


@pytest.mark.postgres
def test_the_checks_name_a_superuser_and_an_unreachable_server(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert deployment_problems(postgres_server.superuser_dsn, connect_timeout=5) == (
        [SUPERUSER_LINE],
        True,
    )
    missing = f"postgresql://{READER_ROLE}@/app?host={postgres_server.socket_dir}-missing"
    (line,), connected = deployment_problems(missing, connect_timeout=5)
    assert not connected
    assert line.startswith("cannot connect to the database: PostgreSQL could not be reached")
    # In the background, each problem is one warning.
    with caplog.at_level("WARNING"):
        thread = announce_deployment_problems(
            reader_settings(postgres_server, sql_dsn=SecretStr(postgres_server.superuser_dsn))
        )
        assert thread is not None
        thread.join(60)
    assert [record.getMessage() for record in caplog.records] == [
        f"read_only_sql: {SUPERUSER_LINE}"
    ]


def test_the_start_up_check_needs_a_dsn_and_survives_its_own_faults(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_server_suite.config import Settings
    from mcp_server_suite.tools.sql import deployment

    assert announce_deployment_problems(Settings()) is None

    def broken(dsn: str, *, connect_timeout: float) -> tuple[list[str], bool]:
        raise RuntimeError("a fault of the check's own")

    monkeypatch.setattr(deployment, "deployment_problems", broken)
    settings = Settings(sql_dsn=SecretStr("postgresql://nobody@/nowhere?host=/nonexistent"))
    with caplog.at_level("WARNING"):
        thread = announce_deployment_problems(settings)
        assert thread is not None
        thread.join(10)
    assert "the start-up check of MCP_SQL_DSN failed" in caplog.text


@pytest.mark.parametrize(
    ("message", "sqlstate"),
    [
        ('failed: FATAL:  password authentication failed for user "x"', "28P01"),
        ('failed: FATAL:  no pg_hba.conf entry for host "[local]"', "28000"),
        ('failed: FATAL:  database "x" does not exist', "3D000"),
        ("failed: FATAL:  sorry, too many clients already", "53300"),
        ("failed: FATAL:  the database system is starting up", "57P03"),
        ("failed: FATAL:  something PostgreSQL says one day", "08004"),
    ],
)
def test_a_refused_login_is_read_from_postgresqls_own_words(message: str, sqlstate: str) -> None:
    from mcp_server_suite.tools.sql.conditions import connection_failed

    failure = connection_failed(message, None, log=False)
    assert failure.problem.metadata["sqlstate"] == sqlstate


def test_libpq_messages_without_words_are_still_told() -> None:
    from mcp_server_suite.tools.sql.conditions import connection_failed, connection_lost

    for message in (None, "", "\n \n"):
        assert connection_lost(message).problem.metadata["retryable"] is True
        assert connection_failed(message, None, log=False).problem.detail.startswith(
            "PostgreSQL could not be reached"
        )


@pytest.mark.postgres
def test_a_server_that_never_answers_is_unreachable_at_the_timeout(
    postgres_server: PostgresServer,
) -> None:
    import socket

    directory = Path(tempfile.mkdtemp(prefix="mcp-mute-", dir="/tmp"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(directory / ".s.PGSQL.5432"))
        listener.listen(8)
        dsn = f"postgresql://{READER_ROLE}@/app?host={directory}"
        outcome = _one_call(
            reader_settings(postgres_server, sql_dsn=SecretStr(dsn), sql_connect_timeout=0.5)
        )
        assert isinstance(outcome, ToolFailure)
        assert outcome.problem.detail.startswith("PostgreSQL could not be reached")
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


def _one_call(settings: Settings, query: str = "SELECT 1") -> object:
    async def main() -> object:
        tool = SQLTool(settings)
        try:
            return await tool.run(ReadOnlySQLParams(query=query))
        except Exception as exc:  # noqa: BLE001  # The outcome is what the test reads.
            return exc
        finally:
            await tool.aclose()

    return asyncio.run(main())


@pytest.mark.postgres
def test_a_call_sent_twice_on_ended_sessions_is_told_the_connection_was_lost(
    own_server: tuple[PostgresServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = own_server
    settings = reader_settings(server, sql_pool_max_size=2)
    monkeypatch.setattr(session, "_closed_by_server", lambda conn: conn.closed)

    async def main() -> object:
        tool = SQLTool(settings)
        try:
            await asyncio.gather(*(tool.run(ReadOnlySQLParams(query=OVERLAPPING)) for _ in "ab"))
            _terminate_reader_sessions(server)
            await _reader_sessions_ended(server)
            database = await tool.database()
            # Both sessions are idle in the pool, and both have ended.
            return await database.run(
                await tool._check(ReadOnlySQLParams(query="SELECT 3 AS three"))
            )
        except ToolFailure as exc:
            return exc
        finally:
            await tool.aclose()

    outcome = asyncio.run(main())
    assert isinstance(outcome, ToolFailure), outcome
    assert outcome.problem.detail.startswith("The connection to PostgreSQL was lost")


@pytest.mark.postgres
def test_a_pipeline_out_of_step_in_a_call_is_this_servers_fault(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = session._pipeline

    def out_of_step(pgconn: Any, statements: Any, received: Any) -> Any:
        if len(statements) > 3:  # The call's read, not the connection's set-up.
            raise DatabaseUnavailable("the pipeline's results did not match its statements")
        return original(pgconn, statements, received)

    monkeypatch.setattr(session, "_pipeline", out_of_step)
    outcome = _one_call(reader_settings(postgres_server))
    assert isinstance(outcome, DatabaseUnavailable)


def test_a_closed_connection_is_never_taken_for_a_live_one(
    postgres_server: PostgresServer,
) -> None:
    async def main() -> bool:
        conn = await psycopg.AsyncConnection.connect(postgres_server.dsn(), autocommit=True)
        await conn.close()
        return session._closed_by_server(conn)

    assert asyncio.run(main())


def test_a_cleanup_statement_postgresql_refused_is_in_band() -> None:
    class Refused:
        status = psycopg.pq.ExecStatus.FATAL_ERROR

        def error_field(self, field: psycopg.pq.DiagnosticField) -> bytes:
            if field == psycopg.pq.DiagnosticField.SQLSTATE:
                return b"26000"
            return b'prepared statement "mcp_read_back" does not exist'

    with pytest.raises(ToolFailure) as caught:
        session._ensure_completed([Refused()])  # type: ignore[list-item]  # A stand-in.
    assert POOLING_ADVICE in caught.value.problem.detail


@pytest.mark.postgres
def test_a_call_that_finds_its_prepared_guard_gone_refuses_every_next_call(
    postgres_server: PostgresServer,
) -> None:
    async def main() -> list[object]:
        tool = SQLTool(reader_settings(postgres_server, sql_pool_max_size=1))
        try:
            await tool.run(ReadOnlySQLParams(query="SELECT 1"))
            database = await tool.database()
            # What a pooler's DISCARD ALL between two clients does to the session.
            async with database._connection() as conn:
                await conn.execute("DEALLOCATE ALL")
            outcomes: list[object] = []
            for _ in range(2):
                try:
                    outcomes.append(await tool.run(ReadOnlySQLParams(query="SELECT 2")))
                except ToolFailure as exc:
                    outcomes.append(exc)
            return outcomes
        finally:
            await tool.aclose()

    outcomes = asyncio.run(main())
    assert all(isinstance(outcome, ToolFailure) for outcome in outcomes), outcomes
    assert all(POOLING_ADVICE in outcome.problem.detail for outcome in outcomes)  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_a_catalog_read_postgresql_refused_is_in_band(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(conn: Any, schemas: Any) -> Any:
        raise psycopg.errors.InsufficientPrivilege("permission denied for table pg_class")

    monkeypatch.setattr(session, "_read_catalog", refused)
    outcome = _one_call(reader_settings(postgres_server))
    assert isinstance(outcome, ToolFailure)
    assert outcome.problem.metadata["sqlstate"] == "42501"
