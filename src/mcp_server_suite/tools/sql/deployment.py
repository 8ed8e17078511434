"""What a deployment of `read_only_sql` gets wrong before any call: said once, at start-up.

Rules:

1. At start-up (`announce_deployment_problems`) and in `--check-config`
   (`deployment_problems`), the server connects to MCP_SQL_DSN twice, synchronously, and
   says in one line each what would make every call fail: a connection that cannot be made
   (a refused login, a database that does not exist, a server that does not answer), a
   superuser role, and a pooler that hands one server session to several clients.
2. A pooler in transaction or statement mode shows itself by the server process behind the
   sessions (`pg_backend_pid()`, which PostgreSQL reports itself: a pooler makes up the key
   data libpq keeps): the second connection lands on the first one's backend, or the first
   one moves to another. PgBouncer hands an idle server session to the next client, so the
   second connection lands on the first one's. Session pooling holds each client's server
   session for the client's lifetime and is not reported.
3. The start-up check runs in a daemon thread, so the handshake never waits for it; nothing
   it finds stops the server (each call then reports the same condition in-band).
"""

import logging
import threading
from typing import Final

from mcp_server_suite.config import Settings

__all__ = [
    "CHECK_APPLICATION_NAME",
    "SUPERUSER_LINE",
    "announce_deployment_problems",
    "deployment_problems",
]

logger = logging.getLogger(__name__)

# The application name of the checks' own connections, apart from the pool's.
CHECK_APPLICATION_NAME: Final = "mcp-server-suite check"
# What a superuser role means for every call.
SUPERUSER_LINE: Final = (
    "MCP_SQL_DSN connects as a superuser, and read_only_sql runs no query as one: every call "
    "is refused until it connects as a least-privilege role (scripts/least-privilege-role.sql)"
)
# libpq takes whole seconds of connect timeout, and treats anything below 2 as 2.
_MIN_CONNECT_TIMEOUT_S: Final = 2


def deployment_problems(dsn: str, *, connect_timeout: float) -> tuple[list[str], bool]:
    """Connect twice and say what would make every call fail (Rules 1 and 2).

    Args:
        dsn: The connection URI (a secret: never printed; libpq's messages omit passwords).
        connect_timeout: Seconds to wait for the server.

    Returns:
        One line per problem, and whether a connection could be made at all.
    """
    import psycopg  # noqa: PLC0415  # Loaded for the check only.

    from mcp_server_suite.tools.sql.conditions import (  # noqa: PLC0415
        POOLING_ADVICE,
        connection_failed,
    )

    options = {
        "autocommit": True,
        "connect_timeout": max(_MIN_CONNECT_TIMEOUT_S, round(connect_timeout)),
        "application_name": CHECK_APPLICATION_NAME,
    }
    backend = "SELECT pg_catalog.pg_backend_pid()"
    try:
        with psycopg.connect(dsn, **options) as first:  # type: ignore[arg-type]  # Typed above.
            problems = []
            if first.pgconn.parameter_status(b"is_superuser") == b"on":
                problems.append(SUPERUSER_LINE)
            pid = first.execute(backend).fetchone()
            with psycopg.connect(dsn, **options) as second:  # type: ignore[arg-type]
                other = second.execute(backend).fetchone()
                again = first.execute(backend).fetchone()
            if pid == other or again != pid:
                problems.append(POOLING_ADVICE)
            return problems, True
    except psycopg.Error as exc:
        # libpq's message names the host or socket, which the operator may read.
        failure = connection_failed(str(exc), None, log=False)
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [f"cannot connect to the database: {failure.problem.detail} ({first_line})"], False


def announce_deployment_problems(settings: Settings) -> threading.Thread | None:
    """Start the start-up check in a daemon thread (Rule 3); None when SQL is off.

    Args:
        settings: The validated configuration.

    Returns:
        The thread, for tests to wait on.
    """
    dsn = settings.sql_dsn
    if dsn is None:
        return None

    def check() -> None:
        try:
            problems, _ = deployment_problems(
                dsn.get_secret_value(), connect_timeout=settings.sql_connect_timeout
            )
        except Exception:  # A bug in the check must not end the server.
            logger.exception("read_only_sql: the start-up check of MCP_SQL_DSN failed")
            return
        for line in problems:
            logger.warning("read_only_sql: %s", line)

    thread = threading.Thread(target=check, name="mcp-sql-start-up-check", daemon=True)
    thread.start()
    return thread
