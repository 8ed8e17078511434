"""The fourth layer of `read_only_sql`: the pool, its pinned sessions, one read per call.

Rules:

1. A connection is used only while its pinned settings hold: `standard_conforming_strings =
   on`, `client_encoding = UTF8`, `search_path = pg_catalog, <trusted extensions' schemas>,
   pg_temp` (trusted code alone resolves by name; `pg_temp` is listed last so that it is never
   searched before them), `default_transaction_read_only = on` and the output styles
   `values.py` relies on, and the session's timeouts (`statement_timeout` among them, so no
   call sets its own). They are set and read back when a connection is created, read back
   again at the end of every call, and the values PostgreSQL reports on its own are checked
   before every use. A connection that fails a check is closed, never used. So is one whose
   role is a superuser.
2. When a connection is created, the role audit (`role_audit.py`) runs on it and both forms
   of its guard are prepared on it (`mcp_guard`, `mcp_guard_unchanged`). A connection whose
   audit (or guard) found problems refuses its calls in-band, naming them, and is audited
   again before each next use.
3. One call is one network round trip: a libpq pipeline ended by a single Sync, so that
   libpq writes it at once and PostgreSQL answers it at once: `BEGIN TRANSACTION READ
   ONLY`, the guard (which fails while the role could run untrusted code), the statement
   itself, `ROLLBACK`, then the read-back of the pins, which also releases any
   session-level advisory lock. Every statement travels over the extended query protocol,
   in which PostgreSQL refuses a second statement in one; the guards and the read-back are
   prepared on the session and run by name. An error skips the rest of the pipeline, the
   ROLLBACK included, so a call whose read failed ends its transaction (ROLLBACK, then the
   read-back) in a second round trip: only calls that fail pay it.
4. The guard skips its checks while the cluster's snapshot is the one under which it last
   passed on the connection: no transaction has committed or begun writing anywhere since,
   so no catalog can have changed. On a connection whose last guard found the snapshot
   unchanged, a call sends the guard's short form, `mcp_guard_unchanged`, which only makes
   that comparison (PostgreSQL would start the full guard's plan, some thirty catalog scans,
   even to skip it). When the snapshot has moved, the short form fails, nothing else of the
   read runs, and the call is made again with the full guard (after the ROLLBACK the
   failure needs, in the same round trip), which the connection then keeps sending until it
   finds the cluster unchanged again: a busy cluster pays the full checks on every call,
   and never a second round trip.
5. The statement's last column is the running total of the rows' text bytes
   (`statement.py`): rows past `max_result_bytes` arrive without their values, and are cut;
   a first row past it is refused in-band, with the bound in the detail. The wrapper caps
   the rows at `max_rows + 1`, so the statement runs as it is, without a cursor.
6. A connection goes back to the pool clean. A call that ended with its own read-back
   ran nothing but its checked statement, in a transaction that was rolled back; what
   survives a rollback is proved absent by the read-back (prepared statements, holdable
   cursors, LISTEN registrations) or released by it (advisory locks: counting them would
   read the whole server's lock table, which grows with every session of the cluster).
   Any other connection is rolled back and then cleared and read back before it goes back
   to the pool. One whose state cannot be established is closed. Cancellation cancels the
   query on the server too, and asks again until the pipeline ends: PostgreSQL drops a
   cancel request that arrives while it reads the pipeline's next message or plans and
   compiles a statement, and the statement would then run on to the statement timeout. A
   session whose connection is closed while its query runs ends itself within
   `client_connection_check_interval`.
7. Every error PostgreSQL reports, and every connection libpq cannot make or loses, becomes
   an in-band problem (`conditions.py`): the query's, the database's, the connection's or
   the operator's configuration's, with what to do. A superuser role is refused in-band,
   and so is a server session that a pooler shares between clients (a transaction or
   statement pooler): a new connection that finds the session's own prepared statements
   made already, or the backend of another open connection, or a call that finds them
   gone. `DatabaseUnavailable`, an internal error whose text reaches stderr only, is left
   for what only a fault of this server causes. No message carries the DSN.
8. A pooled connection whose session PostgreSQL ended while it was idle (a restart, an
   `idle_session_timeout`, `pg_terminate_backend`) is found before it is used: an idle
   session has nothing to read, and PostgreSQL writes its error to such a session before
   closing it (or just closes it). It is discarded and another taken, without a round trip
   and without sending the call: a call that may have run is never sent again.
9. An EXPLAIN runs without the wrapper, so PostgreSQL sends its whole plan: its rows are
   taken one at a time (libpq's single-row mode) and kept while they fit `max_rows` and
   `max_result_bytes`, the rest read and dropped, so that the server holds no more of a
   plan than of any result. A plan in one row (`FORMAT JSON`) larger than the bound is
   refused, as a first row past the bound is; its transfer is bounded by the statement
   timeout alone.
10. A statement seen for the first time is resolved before it runs, in a round trip of its
    own (`ReadOnlyDatabase.resolve`, `probe.py`): the same pins, guard and read-back, and
    the statement parsed, never executed.
"""

import asyncio
import contextlib
import logging
import math
import re
import select
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.abc import PQGen
from psycopg.abc import Transformer as RowLoader
from psycopg.adapt import Transformer
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import error_from_result
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus, PipelineStatus, TransactionStatus
from psycopg.pq.abc import PGconn, PGresult
from psycopg.waiting import Ready, Wait
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from mcp_server_suite.schemas.errors import DeadlineExceeded, ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.conditions import (
    condition_failure,
    connection_failed,
    connection_lost,
    invalid_dsn_failure,
    shared_session_failure,
    superuser_failure,
)
from mcp_server_suite.tools.sql.policy import ensure_read_alike
from mcp_server_suite.tools.sql.role_audit import (
    GUARD_SQLSTATE,
    UNCHANGED_GUARD,
    RoleProblem,
    TrustedCode,
    audit_sql,
    guard_sql,
    refusal,
)
from mcp_server_suite.tools.sql.statement import (
    MAX_CATALOG_RELATIONS,
    ExecutableStatement,
    RelationCatalog,
)
from mcp_server_suite.tools.sql.values import (
    bound_rows,
    first_row_too_large,
    make_adapters,
    normalise_rows,
)

__all__ = [
    "CATALOG_TTL_S",
    "CLIENT_GRACE_S",
    "GUARD_NAME",
    "IDLE_IN_TRANSACTION_TIMEOUT_MS",
    "LOCK_TIMEOUT_MS",
    "READ_BACK_NAME",
    "UNCHANGED_GUARD_NAME",
    "DatabaseUnavailable",
    "FetchedRows",
    "ParseOnly",
    "ReadOnlyDatabase",
    "SessionPins",
    "fetch_read_only",
    "shown_milliseconds",
    "translate_database_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The prepared statement of the role audit's guard, kept on each connection for its lifetime:
# planning the guard costs about 2 ms, running it prepared a few hundred microseconds.
GUARD_NAME: Final = "mcp_guard"
# Its short form (Rule 4): only the comparison of snapshots, a few microseconds.
UNCHANGED_GUARD_NAME: Final = "mcp_guard_unchanged"
# The prepared read-back of the pins that ends every call (planned once per connection).
READ_BACK_NAME: Final = "mcp_read_back"
# The relation catalog that qualifies unqualified names is read again after this long, and
# at most once a second when a query names a relation it does not hold: a table created a
# moment ago is found on the next call, without a catalog read on every call.
CATALOG_TTL_S: Final = 30.0
CATALOG_MISS_REFRESH_S: Final = 1.0
# The design document's least-privilege role settings: a query waits at most 1 s for a lock,
# and a session idle inside a transaction for 15 s is ended by the server.
LOCK_TIMEOUT_MS: Final = 1_000
IDLE_IN_TRANSACTION_TIMEOUT_MS: Final = 15_000
# The client gives the server this much longer than statement_timeout before cancelling on its
# own, so that a timeout is normally the server's, reported cleanly as SQLSTATE 57014.
CLIENT_GRACE_S: Final = 1.0
# A cancelled call asks PostgreSQL to cancel its pipeline again after this long, until the
# pipeline ends: a request that arrives between two messages of the pipeline, or while a
# statement is planned and JIT-compiled (which alone can take a few hundred milliseconds), is
# dropped, not kept for the statement that follows. A quarter of a second reaches the running
# statement within one planning of it.
CANCEL_RESEND_S: Final = 0.25
# How long a cancelled pipeline is given to end before psycopg's own handling takes over
# (which cancels once more, waits five seconds, and then closes the connection): eight
# requests, and a statement that ignores all of them ignores cancellation altogether.
CANCEL_WAIT_S: Final = 2.0
# A backend checks this often, while a query runs, whether its client is still connected,
# and ends the query when it is gone: the connection of a pipeline that would not stop is
# closed, and its backend must not run on to the statement timeout (PostgreSQL 14 and newer).
CLIENT_CHECK_INTERVAL_MS: Final = 1_000
# libpq's connect_timeout is whole seconds and treats anything below 2 as 2.
MIN_CONNECT_TIMEOUT_S: Final = 2
# A pool connection is replaced after an hour and closed after ten idle minutes
# (psycopg_pool's defaults, stated here so a change is a decision).
MAX_CONNECTION_LIFETIME_S: Final = 3600.0
MAX_CONNECTION_IDLE_S: Final = 600.0
_REPORTED_PINS: Final = (
    (b"standard_conforming_strings", b"on"),
    (b"client_encoding", b"UTF8"),
    (b"DateStyle", b"ISO, YMD"),
    (b"IntervalStyle", b"iso_8601"),
    (b"is_superuser", b"off"),
)

# The statements of every call, encoded once; only the checked SQL and the snapshot the
# guard compares are added per call (the guards and the read-back run by name: `_Prepared`).
_BEGIN: Final = b"BEGIN TRANSACTION READ ONLY"
_ROLLBACK: Final = b"ROLLBACK"
# A snapshot as `pg_current_snapshot()` writes it: xmin:xmax:xip,...
_SNAPSHOT: Final = re.compile(r"\d+:\d+:[\d,]*")
# The guard's place in the read segment: after BEGIN.
_GUARD_INDEX: Final = 1
# The session's own prepared statements; the read-back proves there is no other.
_PREPARED_NAMES: Final = (GUARD_NAME, UNCHANGED_GUARD_NAME, READ_BACK_NAME)

# What clears the session state a rollback leaves: holdable cursors and LISTEN registrations
# survive a committed transaction, and none may reach the next call (the read-back releases
# advisory locks itself). Prepared statements survive even a rollback; the only ones a session
# may hold are its own, which the read-back proves (no query can PREPARE: the policy refuses
# it, and the statement that runs is proved to be the checked SELECT).
_RESET_STATEMENTS: Final = ("CLOSE ALL", "UNLISTEN *")
# The query that reads every pinned setting back, in `SessionPins.ensure_read_back()` order,
# and releases the session-level advisory locks a rolled-back transaction leaves (Rule 6).
_READ_BACK: Final = (
    "SELECT pg_catalog.current_setting('standard_conforming_strings'), "  # nosec B608  # Constants.
    "pg_catalog.current_setting('client_encoding'), "
    "pg_catalog.current_setting('search_path'), "
    "pg_catalog.current_setting('default_transaction_read_only'), "
    "pg_catalog.current_setting('DateStyle'), "
    "pg_catalog.current_setting('IntervalStyle'), "
    "pg_catalog.current_setting('bytea_output'), "
    "pg_catalog.current_setting('is_superuser'), "
    "pg_catalog.current_setting('statement_timeout'), "
    "pg_catalog.current_setting('lock_timeout'), "
    "pg_catalog.current_setting('idle_in_transaction_session_timeout'), "
    "(SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_statements "
    f"WHERE name OPERATOR(pg_catalog.<>) ALL ('{{{','.join(_PREPARED_NAMES)}}}')), "
    # What a committed transaction leaves in a session (a call's never commits): holdable
    # cursors (the read-back's own unnamed portal aside) and LISTEN registrations.
    "(SELECT pg_catalog.count(*) FROM pg_catalog.pg_cursors "
    "WHERE name OPERATOR(pg_catalog.<>) '') "
    "+ (SELECT pg_catalog.count(*) FROM pg_catalog.pg_listening_channels()), "
    "pg_catalog.pg_advisory_unlock_all()"
)
# The columns of the read-back: eleven settings, two counts and the release of the locks.
_READ_BACK_COLUMNS: Final = 14
# How PostgreSQL shows a setting kept in milliseconds: in the largest unit that holds the value
# exactly (`SHOW statement_timeout` is `10s` for 10,000).
_TIME_UNITS: Final = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))
# The results a statement of the cleanup segment may end with.
_COMPLETED: Final = frozenset({ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK})


class DatabaseUnavailable(RuntimeError):
    """PostgreSQL could not serve the call: an infrastructure fault, reported as -32603."""


@dataclass(frozen=True, slots=True)
class FetchedRows:
    """The normalised outcome of one read.

    Attributes:
        columns: Column names in result order.
        rows: At most `max_rows` rows of JSON values.
        truncated: True when a server bound, not the query, ended the rows.
        truncated_reason: `max_rows` or `max_result_bytes`, or None.
    """

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncated_reason: str | None = None


@dataclass(frozen=True, slots=True)
class SessionPins:
    """The settings every pooled session holds, and the statements that set and check them.

    Attributes:
        schemas: The schemas of the trusted extensions, searched after pg_catalog (never the
            schemas of MCP_SQL_SCHEMAS: their relations are qualified by `statement.py`).
        statement_timeout_ms: The session's statement timeout, which every statement of a
            call runs under.
    """

    schemas: tuple[str, ...]
    statement_timeout_ms: int

    @property
    def search_path(self) -> tuple[str, ...]:
        """The pinned search_path: trusted schemas, and pg_temp last so it never comes first."""
        return ("pg_catalog", *self.schemas, "pg_temp")

    def set_statements(self) -> sql.Composed:
        """Return the statements that pin a new session, then read the pins back."""
        path = sql.SQL(", ").join(sql.Identifier(schema) for schema in self.search_path)
        return (
            sql.SQL(
                "SET standard_conforming_strings = on; "
                "SET client_encoding = 'UTF8'; "
                "SET search_path = {path}; "
                "SET default_transaction_read_only = on; "
                "SET DateStyle = 'ISO, YMD'; "
                "SET IntervalStyle = 'iso_8601'; "
                "SET bytea_output = 'hex'; "
                "SET extra_float_digits = 1; "
                "SET row_security = on; "
                "SET statement_timeout = {statement}; "
                "SET lock_timeout = {lock}; "
                "SET idle_in_transaction_session_timeout = {idle}; "
                "SET client_connection_check_interval = {check}; "
                # The session's only prepared statements are its own (`_PREPARED_NAMES`):
                # planned once, never again per call (the guards take a parameter).
                "SET plan_cache_mode = force_generic_plan; "
            ).format(
                path=path,
                statement=sql.Literal(self.statement_timeout_ms),
                lock=sql.Literal(LOCK_TIMEOUT_MS),
                idle=sql.Literal(IDLE_IN_TRANSACTION_TIMEOUT_MS),
                check=sql.Literal(CLIENT_CHECK_INTERVAL_MS),
            )
            + self.read_back()
        )

    @staticmethod
    def reset_statements() -> sql.Composed:
        """Return the statements that clear the session's state, then read back.

        Holdable cursors and LISTEN registrations survive a committed transaction, and advisory
        locks and prepared statements a rolled-back one; none may reach the next call. This is
        the pool's reset, for a connection whose call did not end with its own read-back.
        """
        return sql.SQL("".join(f"{statement}; " for statement in _RESET_STATEMENTS)) + (
            SessionPins.read_back()
        )

    @staticmethod
    def read_back() -> sql.SQL:
        """Return the query that reads every pinned setting, in `ensure_read_back()` order."""
        return sql.SQL(_READ_BACK)

    def ensure_read_back(self, row: Sequence[Any] | None) -> None:
        """Check the row `read_back()` returned.

        Raises:
            ToolFailure: The role is a superuser (in-band, Rule 7).
            DatabaseUnavailable: A setting differs from its pin.
        """
        if row is None or len(row) != _READ_BACK_COLUMNS:
            raise DatabaseUnavailable("the session's settings could not be read back")
        scs, encoding, path, read_only, date_style, interval_style, bytea, superuser = row[:8]
        if row[11] != 0:
            raise DatabaseUnavailable("the session holds a prepared statement of its own")
        if row[12] != 0:
            raise DatabaseUnavailable("the session holds a cursor or a listener")
        if superuser != "off":
            raise superuser_failure()
        path_items = tuple(item.strip().strip('"') for item in str(path).split(","))
        if (scs, encoding, read_only, date_style, interval_style, bytea, *row[8:11]) != (
            "on",
            "UTF8",
            "on",
            "ISO, YMD",
            "iso_8601",
            "hex",
            shown_milliseconds(self.statement_timeout_ms),
            shown_milliseconds(LOCK_TIMEOUT_MS),
            shown_milliseconds(IDLE_IN_TRANSACTION_TIMEOUT_MS),
        ) or path_items != self.search_path:
            raise DatabaseUnavailable("the session's pinned settings did not hold")


def shown_milliseconds(value: int) -> str:
    """Return a setting kept in milliseconds as PostgreSQL shows it (`10s` for 10,000).

    Args:
        value: The setting, in milliseconds.
    """
    if value <= 0:
        return str(value)
    for unit, size in _TIME_UNITS:
        if value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}ms"


def ensure_reported_pins(conn: AsyncConnection[Any]) -> None:
    """Check, without a round trip, the pinned settings PostgreSQL reports on its own.

    Raises:
        DatabaseUnavailable: A reported setting differs from its pin.
    """
    for name, expected in _REPORTED_PINS:
        if conn.pgconn.parameter_status(name) != expected:
            raise DatabaseUnavailable(f"the session's {name.decode()} is not pinned")


async def _last_row(cursor: AsyncCursor[Any]) -> Sequence[Any] | None:
    # A multi-statement query yields one result per statement; the read-back comes last.
    while cursor.nextset():
        pass
    return await cursor.fetchone()


class ReadOnlyDatabase:
    """The connection pool of `read_only_sql`, created on the first call.

    Args:
        dsn: The connection URI (a secret: never logged or echoed).
        trusted: What the operator trusts, and the schemas the role reads.
        statement_timeout_ms: The server's statement timeout for every call.
        application_name: Shown in pg_stat_activity.
        connect_timeout: Seconds to connect, and to wait for a free connection.
        query_timeout: Seconds a query may run (the server's statement_timeout).
        pool_max_size: The most connections.

    Raises:
        ToolFailure: The DSN is not a valid connection string (in-band: the configuration's).
    """

    def __init__(
        self,
        dsn: str,
        *,
        trusted: TrustedCode,
        statement_timeout_ms: int,
        application_name: str,
        connect_timeout: float,
        query_timeout: float,
        pool_max_size: int,
    ) -> None:
        # libpq's parse errors quote the offending part of the DSN, which can be the password:
        # the error is dropped whole, and the exception raised below does not even keep it as
        # its context.
        try:
            conninfo_to_dict(dsn)
            parsed = True
        except psycopg.Error:
            parsed = False
        if not parsed:
            raise invalid_dsn_failure()
        self._trusted: Final = trusted
        self._statement_timeout_ms: Final = statement_timeout_ms
        # Known once the first connection has read where the trusted extensions live.
        self._pins: SessionPins | None = None
        self._connect_timeout: Final = connect_timeout
        self._query_timeout: Final = query_timeout
        self._max_size: Final = pool_max_size
        self._holding = 0
        self._catalog: RelationCatalog | None = None
        self._catalog_read_at = -math.inf
        self._catalog_lock: Final = asyncio.Lock()
        # Connections whose call ended with a verified cleanup segment (Rule 5), and the
        # audit's findings on each connection (Rule 2); weak, so that a connection the pool
        # drops is forgotten here too.
        self._cleaned: Final[weakref.WeakSet[AsyncConnection[Any]]] = weakref.WeakSet()
        self._problems: Final[
            weakref.WeakKeyDictionary[AsyncConnection[Any], list[RoleProblem]]
        ] = weakref.WeakKeyDictionary()
        # The snapshot under which each connection's guard last passed, and the connections
        # whose last guard found it unchanged, which send the guard's short form (Rule 4).
        self._guarded_at: Final[weakref.WeakKeyDictionary[AsyncConnection[Any], str]] = (
            weakref.WeakKeyDictionary()
        )
        self._unchanged: Final[weakref.WeakSet[AsyncConnection[Any]]] = weakref.WeakSet()
        # The role audit's advice already logged (Rule 2).
        self._advised: Final[set[str]] = set()
        # The backend process of each connection (Rule 7), and how the last attempt to make a
        # connection failed (None after one succeeded).
        self._backends: Final[weakref.WeakKeyDictionary[AsyncConnection[Any], int]] = (
            weakref.WeakKeyDictionary()
        )
        self._setup_failure: Exception | None = None
        # Set once a pooler that shares server sessions is found: every call is refused.
        self._shared = False
        self._pool: Final = AsyncConnectionPool(
            conninfo=dsn,
            kwargs={
                "autocommit": True,
                # Statements are not prepared implicitly: the only prepared statement a
                # session holds is the guard, which the read-back checks.
                "prepare_threshold": None,
                "context": make_adapters(),
                "application_name": application_name,
                "client_encoding": "UTF8",
                "connect_timeout": max(MIN_CONNECT_TIMEOUT_S, math.ceil(connect_timeout)),
            },
            min_size=1,
            max_size=pool_max_size,
            open=False,
            connection_class=_recording_connection(self._setup_failed),
            configure=self._configure,
            # No reset callback: psycopg_pool would run it in a worker task after every
            # return, so a connection came back one task switch late, and a call that
            # followed at once found none free and grew the pool. `_connection()` resets a
            # connection before it returns it (Rule 6).
            timeout=connect_timeout,
            max_lifetime=MAX_CONNECTION_LIFETIME_S,
            max_idle=MAX_CONNECTION_IDLE_S,
            name="read_only_sql",
        )

    async def open(self) -> None:
        """Start connecting in the background; calls wait for a connection as they need one."""
        await self._pool.open(wait=False)

    async def close(self) -> None:
        """Close every connection."""
        await self._pool.close()

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        # psycopg_pool logs what this raises and tries again later; a call waiting for a
        # connection meanwhile is told why none came (`_connection`).
        try:
            await self._set_up(conn)
        except (psycopg.Error, ToolFailure, DatabaseUnavailable) as exc:
            if isinstance(exc, psycopg.Error) and exc.sqlstate in _SHARED_SESSION_SQLSTATES:
                # The session's own prepared statement was made already: by another client.
                self._shared = True
            self._setup_failed(exc)
            raise
        self._setup_failed(None)

    def _setup_failed(self, failure: Exception | None) -> None:
        # Records how the last attempt to make a connection ended: None when it succeeded.
        self._setup_failure = failure

    async def _set_up(self, conn: AsyncConnection[Any]) -> None:
        # Rule 7: a backend that another open connection of the pool uses is a pooler's.
        backend = await _backend_pid(conn)
        for other, pid in list(self._backends.items()):
            if pid == backend and not _closed_by_server(other):
                # Every session the pool holds may be another client's too: no call runs.
                self._shared = True
                raise shared_session_failure()
        self._backends[conn] = backend
        if self._pins is None:
            extensions = list(self._trusted.extensions)
            cursor = await conn.execute(_EXTENSION_SCHEMAS, (extensions, extensions))
            schemas = tuple(str(row[0]) for row in await cursor.fetchall())
            self._pins = SessionPins(schemas, self._statement_timeout_ms)
        cursor = await conn.execute(self._pins.set_statements())
        self._pins.ensure_read_back(await _last_row(cursor))
        await self._audit(conn)
        await conn.execute(f"PREPARE {GUARD_NAME}(pg_catalog.text) AS {guard_sql(self._trusted)}")
        await conn.execute(f"PREPARE {UNCHANGED_GUARD_NAME}(pg_catalog.text) AS {UNCHANGED_GUARD}")
        await conn.execute(f"PREPARE {READ_BACK_NAME} AS {_READ_BACK}")

    async def _reset(self, conn: AsyncConnection[Any]) -> None:
        # Runs on every connection before it goes back to the pool (Rule 6).
        if conn in self._cleaned:
            # The call's own read-back proved the pins after its last statement: nothing
            # has run on it since.
            self._cleaned.discard(conn)
            return
        await _recover(conn)
        if conn.closed:
            return
        pins = self._set_up_pins()
        cursor = await conn.execute(pins.reset_statements())
        pins.ensure_read_back(await _last_row(cursor))

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        # A pooled connection, reset (or closed) before it goes back to the pool.
        conn = await self._live_connection()
        self._holding += 1
        try:
            yield conn
        finally:
            self._holding -= 1
            try:
                await self._reset(conn)
            except (psycopg.Error, DatabaseUnavailable, ToolFailure) as exc:
                # A session whose state cannot be established is never used again; the
                # call's own outcome, if it failed, is what goes on. (Neither error's text
                # carries the DSN.)
                logger.warning("closing a database connection that could not be reset: %s", exc)
                await conn.close()
            except BaseException:
                # Cancelled while resetting: closed at once (nothing can interrupt that).
                conn.pgconn.finish()
                raise
            finally:
                await self._pool.putconn(conn)

    async def _live_connection(self) -> AsyncConnection[Any]:
        # A pooled connection whose session PostgreSQL has not ended (Rule 8), within the
        # connect timeout. While no call holds one and the last attempt to make one failed,
        # the call is told why at once rather than when the timeout ends (while calls hold
        # connections, one of theirs may come back: a role's CONNECTION LIMIT below the pool's
        # size only slows the pool down).
        deadline = time.monotonic() + self._connect_timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                conn = await self._pool.getconn(timeout=max(0.0, min(remaining, _WAIT_SLICE_S)))
            except PoolTimeout:
                failure = self._setup_failure
                if failure is not None and not self._holding:
                    raise _setup_failure(failure) from None
                if time.monotonic() < deadline:
                    continue
                if self._holding:
                    # Other calls hold connections: the pool is busy, not broken.
                    raise ToolFailure(
                        f"All {self._max_size} database connections stayed busy for "
                        f"{self._connect_timeout:g} s; retry later.",
                        code=MCPErrorCode.INTERNAL_ERROR,
                        metadata={"retryable": True},
                    ) from None
                raise connection_failed(
                    f"no connection was made within {self._connect_timeout:g} s", None
                ) from None
            if not _closed_by_server(conn):
                return conn
            # PostgreSQL ended the idle session: nothing was sent on it, so nothing ran.
            logger.info("discarding a pooled connection whose session PostgreSQL ended")
            await conn.close()
            await self._pool.putconn(conn)

    def _set_up_pins(self) -> SessionPins:
        # The pins, known once a first connection has been set up (every connection the pool
        # hands out has been).
        if self._pins is None:
            raise DatabaseUnavailable("a connection was used before any was set up")
        return self._pins

    async def catalog(self, *, missing: bool = False) -> RelationCatalog:
        """Return the relation and type catalog, read again when it is old (or, given
        `missing`, a second old).

        Args:
            missing: A query names a relation or type the current catalog does not hold.

        Raises:
            ToolFailure: Every connection stayed busy (in-band, retryable).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """
        async with self._catalog_lock:
            age = time.monotonic() - self._catalog_read_at
            stale = age > (CATALOG_MISS_REFRESH_S if missing else CATALOG_TTL_S)
            if self._catalog is None or stale:
                schemas = self._trusted.schemas
                # Every connection the pool hands out has its pins, the extensions' schemas.
                relations, types = await self._with_connection(
                    lambda conn: _read_catalog(
                        conn, ("pg_catalog", *self._set_up_pins().schemas, *schemas)
                    )
                )
                self._catalog = RelationCatalog(
                    schemas, relations, types, extension_schemas=self._set_up_pins().schemas
                )
                self._catalog_read_at = time.monotonic()
            return self._catalog

    async def run(self, statement: ExecutableStatement) -> FetchedRows:
        """Run a checked statement on a pooled connection.

        Args:
            statement: The statement, as `statement.render_statement()` built it.

        Returns:
            The rows.

        Raises:
            ToolFailure: The role audit, the policy's second check or PostgreSQL refused the
                query, it timed out, its result is too large, or every connection stayed busy
                (in-band problems).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """
        try:
            return await self._with_connection(lambda conn: self._run_on(conn, statement))
        except ToolFailure as exc:
            if exc.problem.metadata.get("sqlstate") in _SHARED_SESSION_SQLSTATES:
                # The session's own prepared statements are gone: a pooler reset it (Rule 7).
                self._shared = True
            raise

    def trusted_schemas(self) -> tuple[str, ...]:
        """The schemas of the trusted extensions, after pg_catalog in `search_path`.

        Raises:
            DatabaseUnavailable: No connection has been set up yet.
        """
        return self._set_up_pins().schemas

    async def resolve(self, query: str, newer_literal: str | None = None) -> bytes:
        """Have PostgreSQL resolve a checked query, without running it (`probe.py`).

        Args:
            query: The query as it would run, its relations qualified.
            newer_literal: `ExecutableStatement.newer_literal` of the statement.

        Returns:
            The tree PostgreSQL resolved it to, as node text.

        Raises:
            ToolFailure: The role audit or PostgreSQL refused the query, it timed out, or every
                connection stayed busy (in-band problems).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """
        from mcp_server_suite.tools.sql.probe import resolve_tree  # noqa: PLC0415

        async def body(conn: AsyncConnection[Any]) -> bytes:
            pins = await self._ready(conn, newer_literal)
            try:
                tree = await resolve_tree(
                    conn,
                    query,
                    pins=pins,
                    guard=_PROBE_GUARD,
                    client_timeout=self._query_timeout + CLIENT_GRACE_S,
                )
            except ToolFailure as failure:
                if failure.problem.metadata.get("sqlstate") == "42P01":
                    raise self._with_search_hint(failure) from failure.__cause__
                raise
            except _GuardRefusedError:
                raise refusal(await self._audit(conn) or [_RACE]) from None
            # The probe ended with its own read-back (Rule 6).
            self._cleaned.add(conn)
            return tree

        return await self._with_connection(body)

    async def read_catalog(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run one of the server's own fixed catalog queries on a pooled connection.

        Args:
            query: The query (a constant of this package, never a caller's text).
            params: Its parameters.

        Returns:
            Its rows.

        Raises:
            ToolFailure: PostgreSQL refused or cancelled the query (a catalog another session
                holds locked past the statement timeout), the connection was lost, or every
                connection stayed busy (in-band, as for a read: `translate_database_error`).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """

        async def body(conn: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            # A psycopg error is translated by `_on_one_connection`, as for every statement
            # outside the call's round trip.
            cursor = await conn.execute(query, params)
            return [tuple(row) for row in await cursor.fetchall()]

        return await self._with_connection(body)

    async def _with_connection(self, body: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        try:
            return await self._on_one_connection(body)
        except _NotRun:
            # Rule 8: the session ended before the call's first statement ran (PostgreSQL
            # ended it as the call was sent); the call is made once more, on another.
            logger.info("a database session ended before the call reached it; sending it again")
        try:
            return await self._on_one_connection(body)
        except _NotRun as exc:
            raise connection_lost(str(exc)) from exc

    async def _on_one_connection(self, body: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        async with self._connection() as conn:
            try:
                return await body(conn)
            except psycopg.Error as exc:
                # The statements run outside the call's round trip (the catalog, an audit).
                raise translate_database_error(exc, self._statement_timeout_ms) from exc

    async def _ready(self, conn: AsyncConnection[Any], newer_literal: str | None) -> SessionPins:
        # Before a connection runs anything of a call: its pins, the server's reading of the
        # statement, and its audit. Returns the pins.
        if self._shared:
            raise shared_session_failure()
        problems = self._problems.get(conn)
        try:
            ensure_reported_pins(conn)
            pins = self._set_up_pins()
        except DatabaseUnavailable:
            await conn.close()
            raise
        # What runs must be read as it was checked: the server's grammar decides (policy.py,
        # Rule 6). Its version came with the connection, so this costs no round trip.
        ensure_read_alike(newer_literal, conn.pgconn.server_version)
        if problems is None or problems:
            # Rule 2: a connection whose audit failed (or, were there one, that was never
            # audited) runs nothing until an audit passes; it is audited again on each use,
            # so that a fixed role is served at once.
            problems = await self._audit(conn)
            if problems:
                raise refusal(problems)
        return pins

    async def _run_on(
        self, conn: AsyncConnection[Any], statement: ExecutableStatement
    ) -> FetchedRows:
        pins = await self._ready(conn, statement.newer_literal)
        last = self._guarded_at.get(conn, "")
        unchanged = conn in self._unchanged
        read = await self._read(
            conn, statement, pins, _guard_statement(last, unchanged=unchanged), retrying=unchanged
        )
        if unchanged and isinstance(read.outcome, _GuardFailed):
            # Rule 4: the snapshot moved since the guard last passed, so nothing else ran; the
            # full guard decides (after the ROLLBACK the short form's failure still needs),
            # and is sent on this connection until it finds no change.
            self._unchanged.discard(conn)
            read = await self._read(
                conn, statement, pins, _guard_statement(last, unchanged=False), after_abort=True
            )
        if read.guarded_at is not None:
            self._guarded_at[conn] = read.guarded_at
            if read.guarded_at == last:
                self._unchanged.add(conn)
            else:
                self._unchanged.discard(conn)
        outcome = read.outcome
        if isinstance(outcome, _GuardFailed):
            # The guard found a problem that appeared after the connection was set up: the
            # audit names it (one more round trip, on this refusal path only).
            raise refusal(await self._audit(conn) or [_RACE])
        if isinstance(outcome, ToolFailure) and outcome.problem.metadata.get("sqlstate") == "42P01":
            raise self._with_search_hint(outcome)
        return _rows_or_raise(outcome)

    async def _read(
        self,
        conn: AsyncConnection[Any],
        statement: ExecutableStatement,
        pins: SessionPins,
        guard: "_Prepared",
        *,
        retrying: bool = False,
        after_abort: bool = False,
    ) -> "_Read":
        read = await _read_in_one_round_trip(
            conn,
            statement,
            statement_timeout_ms=pins.statement_timeout_ms,
            client_timeout=self._query_timeout + CLIENT_GRACE_S,
            pins=pins,
            before=guard,
            guard=True,
            after_abort=after_abort,
            retrying=retrying,
        )
        if not read.aborted:
            # The read returned, and its transaction ended with the read-back, which proved
            # the pins (Rule 6): the pool's reset has nothing left to do.
            self._cleaned.add(conn)
        return read

    async def _audit(self, conn: AsyncConnection[Any]) -> list[RoleProblem]:
        # Runs the whole audit on an idle connection and records the problems that refuse
        # calls; advice (a connection limit below the pool's size, a view the role cannot
        # run) goes to stderr, once per pool.
        cursor = await conn.execute(audit_sql(self._trusted))
        found = [RoleProblem(*map(str, row)) for row in await cursor.fetchall()]
        for advice in (problem.line() for problem in found if not problem.refuses):
            if advice not in self._advised:
                self._advised.add(advice)
                logger.warning("read_only_sql: %s", advice)
        refusing = [problem for problem in found if problem.refuses]
        self._problems[conn] = refusing
        return refusing

    def _with_search_hint(self, failure: ToolFailure) -> ToolFailure:
        # An unknown relation: say where unqualified names were looked for.
        hint = (
            " Unqualified tables and views are looked up in pg_catalog, then in "
            f"MCP_SQL_SCHEMAS ({', '.join(self._trusted.schemas)}); sql_schema lists them."
        )
        problem = failure.problem
        hinted = ToolFailure(
            problem.detail + hint,
            code=problem.code,
            invalid_params=problem.invalid_params,
            metadata=dict(problem.metadata),
        )
        hinted.__cause__ = failure.__cause__
        return hinted


# The problem reported when the guard failed but the audit that followed found nothing: the
# role changed between the two.
_RACE: Final = RoleProblem(
    "execute",
    "the role's privileges changed while the call ran",
    "retry; if it recurs, run mcp-server-suite --check-config",
)

# Where the trusted extensions live (other than pg_catalog), in the order they are named.
_EXTENSION_SCHEMAS: Final = (
    "SELECT n.nspname FROM pg_catalog.pg_extension AS e JOIN pg_catalog.pg_namespace AS n "
    "ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
    "WHERE e.extname OPERATOR(pg_catalog.=) ANY (%s) "
    "AND n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog' "
    "GROUP BY n.nspname ORDER BY pg_catalog.min(pg_catalog.array_position(%s, e.extname::text))"
)

# The relations and types an unqualified name can mean, in one round trip: those of
# pg_catalog, the trusted extensions' schemas and MCP_SQL_SCHEMAS (`statement.py`, Rule 1).
# Each kind is bounded alone, so that a schema of many relations leaves room for the types,
# and comes in the order of the schemas, so that the bound drops the names of the last
# schemas searched, never a built-in one that a user's name would then stand in for.
_CATALOG: Final = (
    "(SELECT true, n.nspname, c.relname FROM pg_catalog.pg_class AS c "  # nosec B608  # Constants.
    "JOIN pg_catalog.pg_namespace AS n "
    "ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
    "WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%(p1)s) "
    "AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,v,m,f,p,S}'::pg_catalog.char[]) "
    "ORDER BY pg_catalog.array_position(%(p1)s::pg_catalog.name[], n.nspname) "
    f"LIMIT {MAX_CATALOG_RELATIONS}) UNION ALL "
    "(SELECT false, n.nspname, t.typname FROM pg_catalog.pg_type AS t "
    "JOIN pg_catalog.pg_namespace AS n "
    "ON n.oid OPERATOR(pg_catalog.=) t.typnamespace "
    "WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%(p1)s) "
    "ORDER BY pg_catalog.array_position(%(p1)s::pg_catalog.name[], n.nspname) "
    f"LIMIT {MAX_CATALOG_RELATIONS})"
)


async def _read_catalog(
    conn: AsyncConnection[Any], schemas: tuple[str, ...]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    # (relations, types), each as (schema, name) pairs.
    cursor = await conn.execute(_CATALOG, {"p1": list(dict.fromkeys(schemas))})
    relations: list[tuple[str, str]] = []
    types: list[tuple[str, str]] = []
    for is_relation, schema, name in await cursor.fetchall():
        (relations if is_relation else types).append((str(schema), str(name)))
    return relations, types


# What a session that a pooler shares shows: its own prepared statement there already
# (42P05) when it is set up, or gone (26000) when a call runs it.
_SHARED_SESSION_SQLSTATES: Final = frozenset({"42P05", "26000"})

# A call waiting for a connection looks this often at how the pool's last attempt to make
# one ended: a refused login is reported within a tenth of a second, not at the timeout.
_WAIT_SLICE_S: Final = 0.1


def _closed_by_server(conn: AsyncConnection[Any]) -> bool:
    # Rule 8: an idle session has nothing to read. PostgreSQL writes its FATAL error before it
    # ends a session (a shutdown, idle_session_timeout, pg_terminate_backend), or the socket
    # reaches its end (an immediate shutdown, a crash): either makes the socket readable. One
    # poll, without waiting; nothing is read, so a live session is left as it was.
    if conn.closed or conn.pgconn.status != ConnStatus.OK:
        return True
    # A connection whose status is OK has its socket (`socket` raises only on a bad one).
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


async def _backend_pid(conn: AsyncConnection[Any]) -> int:
    # The server process of the session, as PostgreSQL itself says (a pooler makes up the
    # key data libpq keeps).
    cursor = await conn.execute("SELECT pg_catalog.pg_backend_pid()")
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


def _setup_failure(failure: Exception) -> Exception:
    # What a call is told when no connection could be made: libpq's or PostgreSQL's refusal,
    # in-band, or what the set-up raised itself (a superuser, a shared session).
    if isinstance(failure, psycopg.Error):
        return connection_failed(str(failure), failure.sqlstate)
    return failure


def _recording_connection(
    record: Callable[[Exception | None], None],
) -> type[AsyncConnection[Any]]:
    # The pool's connection class: a failed connect is recorded before psycopg_pool logs it
    # and tries again, so that a waiting call can say why (a refused login, a server down).

    class _RecordingConnection(AsyncConnection[Any]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> "_RecordingConnection":
            try:
                return await super().connect(conninfo, **kwargs)
            except psycopg.Error as exc:
                record(exc)
                raise

    return _RecordingConnection


class _NotRun(Exception):  # A signal between two layers, never shown.
    # The session ended before the first statement of the call's round trip completed:
    # nothing of the call ran, and it may be sent again on another connection (Rule 8).
    pass


class _GuardRefusedError(Exception):
    # The probe's guard failed (`probe.py`): the audit names why.
    pass


class _GuardFailed:
    # The read's guard failed: the role could run code nobody trusted or, for the guard's
    # short form, the cluster's snapshot moved (Rule 4).
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class _Read:
    # What one round trip found: the outcome, the snapshot under which its guard passed, and
    # whether a failure left its transaction aborted (the caller's next round trip starts
    # with ROLLBACK).
    outcome: "FetchedRows | ToolFailure | _GuardFailed"
    guarded_at: str | None = None
    aborted: bool = False


@dataclass(slots=True)
class _Streamed:
    # A statement whose rows are taken one at a time (Rule 9): at most `rows` of them, and
    # `budget` bytes of their text, are kept; `cut` says which bound dropped the rest, and
    # `first_bytes` the size of the first row dropped for bytes.
    sql: bytes
    rows: int
    budget: int
    kept: list[PGresult] = field(default_factory=list)
    used: int = 0
    cut: str | None = None
    first_bytes: int = 0


@dataclass(frozen=True, slots=True)
class _Prepared:
    # A statement prepared on the session, run by name over the extended protocol (Bind and
    # Execute only): PostgreSQL parses no text for it per call.
    name: bytes
    params: tuple[bytes, ...] = ()


_READ_BACK_STATEMENT: Final = _Prepared(READ_BACK_NAME.encode("ascii"))
# The guard a probe sends (`probe.py`): the full form, given no snapshot, so that its checks
# always run (a probe is rare: once per query shape and catalog reading).
_PROBE_GUARD: Final = _Prepared(GUARD_NAME.encode("ascii"), (b"",))


@dataclass(frozen=True, slots=True)
class ParseOnly:
    """A statement sent as the unnamed statement's Parse alone (`probe.py`): PostgreSQL
    analyses and rewrites it, and executes nothing.

    Attributes:
        sql: The statement's text, in the connection's encoding.
    """

    sql: bytes


def _rows_or_raise(outcome: "FetchedRows | ToolFailure | _GuardFailed") -> FetchedRows:
    if isinstance(outcome, ToolFailure):
        raise outcome
    if isinstance(outcome, _GuardFailed):
        raise refusal([_RACE])
    return outcome


def _guard_statement(last: str, *, unchanged: bool) -> _Prepared:
    # The guard, or its short form, given the snapshot under which it last passed. The
    # snapshot is the server's own text (digits, colons, commas), checked again here.
    checked = last if _SNAPSHOT.fullmatch(last) else ""
    name = UNCHANGED_GUARD_NAME if unchanged else GUARD_NAME
    return _Prepared(name.encode("ascii"), (checked.encode("ascii"),))


async def fetch_read_only(
    conn: AsyncConnection[Any],
    statement: str,
    *,
    max_rows: int,
    statement_timeout_ms: int,
    client_timeout: float,
) -> FetchedRows:
    """Run one statement in a read-only transaction that is always rolled back.

    The statement runs over the extended query protocol, in one round trip that ends with
    the rollback (Rule 3), under a transaction-local `statement_timeout` (the connection is
    not a pinned session), without the guard or the byte bound; at most `max_rows` rows are
    returned. The session is not reset: the pool does that.

    Args:
        conn: An idle autocommit connection loading values with `values.make_adapters()`.
        statement: The SQL to run.
        max_rows: The most rows returned.
        statement_timeout_ms: The transaction-local statement_timeout.
        client_timeout: Seconds after which the client cancels the query itself.

    Returns:
        The rows.

    Raises:
        ToolFailure: PostgreSQL refused the query, or it timed out.
        DatabaseUnavailable: The connection or the server failed.
    """
    read = await _read_in_one_round_trip(
        conn,
        ExecutableStatement(statement, max_rows, 0, wrapped=False),
        statement_timeout_ms=statement_timeout_ms,
        client_timeout=client_timeout,
        pins=None,
        before=b"SET LOCAL statement_timeout = %d" % statement_timeout_ms,
    )
    return _rows_or_raise(read.outcome)


async def _read_in_one_round_trip(
    conn: AsyncConnection[Any],
    statement: ExecutableStatement,
    *,
    statement_timeout_ms: int,
    client_timeout: float,
    pins: SessionPins | None,
    before: "bytes | _Prepared",
    guard: bool = False,
    after_abort: bool = False,
    retrying: bool = False,
) -> _Read:
    # Runs Rule 3's round trip: BEGIN, `before` (the guard, given `guard`), the statement,
    # ROLLBACK and, given `pins`, the read-back, ended by one Sync; after an aborted read
    # (`after_abort`) a ROLLBACK comes first. It returns the rows, the in-band problem the
    # query met or the guard's refusal. When a statement of the read fails, PostgreSQL skips
    # the rest of the segment, the ROLLBACK included: the transaction is then ended by a
    # second round trip, unless the caller `retrying` after the guard's short form will do it.
    # It raises when the session's state cannot be established, after `_recover()`.
    #
    # The statement is inserted as SQL on purpose: it is the text `statement.py` built and
    # proved, and the extended protocol refuses anything but one statement.
    encoding = conn.info.encoding
    ending: tuple[bytes | _Prepared, ...] = (
        (_ROLLBACK,) if pins is None else (_ROLLBACK, _READ_BACK_STATEMENT)
    )
    lead = (_ROLLBACK,) if after_abort else ()
    text = statement.sql.encode(encoding)
    streamed = (
        _Streamed(text, statement.max_rows, statement.max_result_bytes)
        if statement.explain_format is not None
        else None
    )
    results = await _round_trip(
        conn,
        (*lead, _BEGIN, before, streamed or text, *ending),
        client_timeout=client_timeout,
        statement_timeout_ms=statement_timeout_ms,
        resend_safe=True,
    )
    transformer = Transformer(conn)
    try:
        _ensure_completed(results[: len(lead)])
        read, ended = results[len(lead) : len(lead) + 3], results[len(lead) + 3 :]
        aborted = any(result.status not in _COMPLETED for result in read)
        if not aborted:
            _ensure_completed(ended)
            if pins is not None:
                read_back = _load_rows(transformer, ended[-1])
                pins.ensure_read_back(read_back[0] if read_back else None)
    except (DatabaseUnavailable, ToolFailure):
        # The transaction may not have ended, or the session holds what it must not: the
        # connection is never used again.
        await conn.close()
        raise
    guarded_at = None
    if guard and read[_GUARD_INDEX].status == ExecStatus.TUPLES_OK:
        guarded_at = str(_load_rows(transformer, read[_GUARD_INDEX])[0][0])
    if aborted and not (retrying and _guard_refused(read[_GUARD_INDEX])):
        await _end_aborted(
            conn, pins, client_timeout=client_timeout, statement_timeout_ms=statement_timeout_ms
        )
        aborted = False
    outcome = _outcome(
        conn,
        transformer,
        statement,
        read,
        guarded=guard,
        statement_timeout_ms=statement_timeout_ms,
        streamed=streamed,
    )
    return _Read(outcome, guarded_at, aborted)


async def _recover_unless_not_run(
    conn: AsyncConnection[Any],
    received: list[PGresult],
    exc: Exception,
    *,
    resend_safe: bool,
) -> None:
    # Recovers the connection after a failed pipeline, then raises `_NotRun` when the session
    # ended before the pipeline's first statement completed (Rule 8).
    ended = conn.pgconn.status == ConnStatus.BAD
    await _recover(conn)
    if resend_safe and ended and not any(r.status in _COMPLETED for r in received):
        raise _NotRun(str(exc)) from exc


def _guard_refused(result: PGresult) -> bool:
    # The guard's own refusal (not any other error the guard's statement could meet).
    sqlstate = result.error_field(DiagnosticField.SQLSTATE)
    return result.status == ExecStatus.FATAL_ERROR and sqlstate == GUARD_SQLSTATE.encode()


async def _end_aborted(
    conn: AsyncConnection[Any],
    pins: SessionPins | None,
    *,
    client_timeout: float,
    statement_timeout_ms: int,
) -> None:
    # Ends a transaction a failed read left aborted, and proves the pins (Rule 6).
    ending: tuple[bytes | _Prepared, ...] = (
        (_ROLLBACK,) if pins is None else (_ROLLBACK, _READ_BACK_STATEMENT)
    )
    results = await _round_trip(
        conn, ending, client_timeout=client_timeout, statement_timeout_ms=statement_timeout_ms
    )
    try:
        _ensure_completed(results)
        if pins is not None:
            read_back = _load_rows(Transformer(conn), results[-1])
            pins.ensure_read_back(read_back[0] if read_back else None)
    except (DatabaseUnavailable, ToolFailure):
        await conn.close()
        raise


async def _round_trip(
    conn: AsyncConnection[Any],
    statements: Sequence["bytes | _Prepared | _Streamed | ParseOnly"],
    *,
    client_timeout: float,
    statement_timeout_ms: int,
    resend_safe: bool = False,
) -> list[PGresult]:
    # One pipeline on the connection, within the client's own timeout; on any failure the
    # connection is recovered (rolled back or closed) before the error goes on. Given
    # `resend_safe` (the pipeline holds the call's statement after its BEGIN), a session that
    # ended before its first statement completed raises `_NotRun` (Rule 8): PostgreSQL
    # answers in order, so nothing of the call ran.
    received: list[PGresult] = []
    try:
        async with asyncio.timeout(client_timeout), conn.lock:
            return await _wait_cancelling(conn, _pipeline(conn.pgconn, statements, received))
    except psycopg.Error as exc:
        await _recover_unless_not_run(conn, received, exc, resend_safe=resend_safe)
        raise translate_database_error(exc, statement_timeout_ms) from exc
    except DatabaseUnavailable as exc:
        # The results did not match the statements: the connection ended mid-pipeline, or a
        # fault of this server's.
        await _recover_unless_not_run(conn, received, exc, resend_safe=resend_safe)
        raise
    except TimeoutError:
        await _recover(conn)
        raise DeadlineExceeded(
            f"The query did not finish within {client_timeout:g} s and was cancelled.",
            metadata={"timeout_seconds": client_timeout},
        ) from None
    except BaseException:
        await _recover(conn)
        raise


async def _wait_cancelling(
    conn: AsyncConnection[Any], pipeline: PQGen[list[PGresult]]
) -> list[PGresult]:
    # Runs the pipeline; when the awaiting task is cancelled (the client's cancellation, the
    # deadline, the client timeout), asks PostgreSQL to cancel it every CANCEL_RESEND_S until
    # it ends, because a request that arrives while the backend reads a message or plans a
    # statement is dropped. Each request is awaited, so none is still on its way when the
    # connection is recovered. Past CANCEL_WAIT_S psycopg's own handling takes over.
    running = asyncio.ensure_future(conn.wait(pipeline))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        try:
            deadline = time.monotonic() + CANCEL_WAIT_S
            while not running.done() and time.monotonic() < deadline:
                with contextlib.suppress(psycopg.Error):
                    await conn.cancel_safe(timeout=CANCEL_WAIT_S)
                await asyncio.wait((running,), timeout=CANCEL_RESEND_S)
        finally:
            # The connection is the pipeline's until it has ended, whatever else is cancelled
            # meanwhile: only then may the caller recover it.
            running.cancel()
            await _settled(running)
        raise


async def _settled(running: "asyncio.Future[Any]") -> None:
    # Waits until `running` has ended, whatever it ended with (the cancellation PostgreSQL
    # reports, most often, which is not the call's outcome) and however often the waiting
    # task is cancelled meanwhile: psycopg ends a cancelled wait within a bounded time.
    while not running.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((running,))
    if not running.cancelled():
        running.exception()  # Retrieved, so that asyncio does not log it as never retrieved.


def _outcome(
    conn: AsyncConnection[Any],
    transformer: RowLoader,
    statement: ExecutableStatement,
    read: list[PGresult],
    *,
    guarded: bool,
    statement_timeout_ms: int,
    streamed: "_Streamed | None" = None,
) -> "FetchedRows | ToolFailure | _GuardFailed":
    # What the read's results mean: the guard's refusal, the query's problem, or rows.
    encoding = conn.info.encoding
    # The first statement that did not complete failed; the ones after it were skipped.
    failed = next(
        (index for index, result in enumerate(read) if result.status not in _COMPLETED), None
    )
    if failed is not None:
        error = error_from_result(read[failed], encoding=encoding)
        if guarded and failed == _GUARD_INDEX and _guard_refused(read[failed]):
            return _GuardFailed()
        problem = translate_database_error(error, statement_timeout_ms)
        if not isinstance(problem, ToolFailure):  # pragma: no cover - a result's error is in-band
            raise problem from error
        problem.__cause__ = error
        return problem
    fetched = read[-1]
    columns = [(fetched.fname(index) or b"").decode(encoding) for index in range(fetched.nfields)]
    rows = _load_rows(transformer, fetched)
    try:
        if streamed is not None:
            # Rule 9: an EXPLAIN's rows, as they were kept.
            rows = [row for result in streamed.kept for row in _load_rows(transformer, result)]
            if streamed.cut == "max_result_bytes" and not rows:
                raise first_row_too_large(streamed.first_bytes, statement.max_result_bytes)
            kept, reason = rows, streamed.cut
        elif statement.wrapped:
            # Rule 5: the last column is the running total of the rows' text bytes.
            kept, reason = bound_rows(rows, statement.max_result_bytes, statement.max_rows)
            columns.pop()
        else:
            kept = rows[: statement.max_rows]
            reason = "max_rows" if len(rows) > statement.max_rows else None
        normalised = normalise_rows(kept, columns, statement.max_result_bytes)
    except ToolFailure as exc:
        return exc
    reason = normalised.truncated_reason or reason
    return FetchedRows(
        columns=columns,
        rows=normalised.rows,
        truncated=reason is not None,
        truncated_reason=reason,
    )


def _load_rows(transformer: RowLoader, result: PGresult) -> list[list[Any]]:
    # Loads a result's rows with the connection's loaders (`values.make_adapters()`); one
    # transformer serves a round trip's results, and keeps the loaders it looked up.
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, list)


def _ensure_completed(results: Sequence[PGresult]) -> None:
    # Raises unless every statement that ends a transaction ran: the error PostgreSQL
    # reported, in-band (the read-back's prepared statement gone is a pooler's doing), or
    # DatabaseUnavailable.
    for result in results:
        sqlstate = (
            result.error_field(DiagnosticField.SQLSTATE)
            if result.status == ExecStatus.FATAL_ERROR
            else None
        )
        if sqlstate:
            message = result.error_field(DiagnosticField.MESSAGE_PRIMARY)
            raise condition_failure(
                sqlstate.decode("ascii", "replace"),
                message.decode("utf-8", "replace") if message else None,
                statement_timeout_ms=0,
            )
        if result.status not in _COMPLETED:
            raise DatabaseUnavailable(
                f"the session cleanup failed ({ExecStatus(result.status).name})"
            )


def _pipeline(
    pgconn: PGconn,
    statements: Sequence["bytes | _Prepared | _Streamed | ParseOnly"],
    received: list[PGresult],
) -> PQGen[list[PGresult]]:
    """Send the statements in pipeline mode, ended by one Sync, and collect their results.

    Hazardous: this drives libpq directly, under the connection's lock, through
    `AsyncConnection.wait()` (which cancels the query on the server and lets this generator
    finish when the awaiting task is cancelled). It leaves the connection out of pipeline
    mode when it returns, and in it when it raises: `_recover()` then closes the connection.

    Args:
        pgconn: The idle connection.
        statements: SQL texts, each sent as one extended-protocol statement, prepared
            statements, run by name, and statements whose rows are taken one at a time
            within bounds (`_Streamed`), and statements only parsed (`ParseOnly`).
        received: Where each result is appended as it arrives (what a failure leaves there
            tells whether the first statement ran).

    Returns:
        One result per statement. A statement after an error has a `PIPELINE_ABORTED` result.

    Raises:
        psycopg.OperationalError: libpq failed, or the connection broke.
        DatabaseUnavailable: The results did not match the statements.
    """
    pgconn.enter_pipeline_mode()
    for statement in statements:
        if isinstance(statement, _Prepared):
            pgconn.send_query_prepared(statement.name, statement.params or None)
        elif isinstance(statement, _Streamed):
            pgconn.send_query_params(statement.sql, None)
        elif isinstance(statement, ParseOnly):
            pgconn.send_prepare(b"", statement.sql)
        else:
            pgconn.send_query_params(statement, None)
    # One Sync, so that libpq flushes once and PostgreSQL answers the whole pipeline at once.
    pgconn.pipeline_sync()
    # Pipeline mode buffers what it sends. While it goes out, replies are read as they
    # arrive, so that a server blocked on writing them never stops reading the rest.
    while pgconn.flush():
        ready = yield Wait.RW
        # After a cancellation psycopg resumes the generator with nothing ready.
        if ready and ready & Ready.R:
            pgconn.consume_input()
    results = received
    for statement in statements:
        if isinstance(statement, _Streamed):
            # Rule 9: its rows one at a time, kept within the bounds, the rest dropped.
            pgconn.set_single_row_mode()
            result = yield from _stream_rows(pgconn, statement)
        else:
            result = yield from _next_result(pgconn)
        # Each statement has one result, and its results end with None.
        if result is None or (yield from _next_result(pgconn)) is not None:
            raise DatabaseUnavailable("the pipeline's results did not match its statements")
        results.append(result)
    sync = yield from _next_result(pgconn)
    if sync is None or sync.status != ExecStatus.PIPELINE_SYNC:
        raise DatabaseUnavailable("the pipeline's results did not match its statements")
    pgconn.exit_pipeline_mode()
    return results


def _stream_rows(pgconn: PGconn, streamed: "_Streamed") -> PQGen[PGresult | None]:
    # Takes a statement's rows in single-row mode, keeping them in `streamed` while they fit
    # its bounds; returns the statement's last result (the empty one that ends the rows, which
    # describes the columns, or an error), or None when there is none.
    while True:
        result = yield from _next_result(pgconn)
        if result is None or result.status != ExecStatus.SINGLE_TUPLE:
            return result
        size = sum(len(result.get_value(0, column) or b"") for column in range(result.nfields))
        if streamed.cut is None and len(streamed.kept) >= streamed.rows:
            streamed.cut = "max_rows"
        elif streamed.cut is None and streamed.used + size > streamed.budget:
            streamed.cut = "max_result_bytes"
            streamed.first_bytes = streamed.first_bytes or size
        if streamed.cut is None:
            streamed.kept.append(result)
            streamed.used += size


def _next_result(pgconn: PGconn) -> PQGen[PGresult | None]:
    # Waits until libpq has the next result, then takes it.
    while pgconn.is_busy():
        if (yield Wait.R):
            pgconn.consume_input()
    return pgconn.get_result()


async def _recover(conn: AsyncConnection[Any]) -> None:
    # Brings the connection back to idle, or closes it so the pool never reuses it.
    try:
        status = conn.pgconn.transaction_status
        if conn.pgconn.pipeline_status != PipelineStatus.OFF:
            # A pipeline left unread: what it still holds is unknown.
            await conn.close()
        elif status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            await conn.execute("ROLLBACK")
        elif status != TransactionStatus.IDLE:
            await conn.close()
    except BaseException:
        # A failed rollback, or a second cancellation during it: the state is unknown, so the
        # connection is closed synchronously (nothing can interrupt that) and discarded.
        conn.pgconn.finish()
        raise


def translate_database_error(exc: psycopg.Error, statement_timeout_ms: int) -> Exception:
    """Translate a psycopg error at the edge: in-band problem or this server's fault (Rule 7).

    Args:
        exc: The error psycopg raised.
        statement_timeout_ms: The statement timeout in force, for the timeout message.

    Returns:
        A `ToolFailure` for every error PostgreSQL reported (`conditions.py`) and for a
        connection libpq lost; `DatabaseUnavailable` for anything else psycopg raises, which
        only a misuse of psycopg by this server causes.
    """
    sqlstate = exc.sqlstate
    if sqlstate:
        return condition_failure(
            sqlstate, exc.diag.message_primary, statement_timeout_ms=statement_timeout_ms
        )
    if isinstance(exc, psycopg.DatabaseError) and not isinstance(exc, psycopg.ProgrammingError):
        # libpq's own error (its results carry no SQLSTATE): the connection failed.
        return connection_lost(str(exc))
    return DatabaseUnavailable(f"psycopg failed: {type(exc).__name__}")
