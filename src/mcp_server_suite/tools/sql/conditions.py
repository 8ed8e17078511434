"""What PostgreSQL's errors mean to a caller of `read_only_sql`: the table of conditions.

Rules:

1. Every error PostgreSQL or libpq reports is caused by the query, the database's state, the
   connection or the operator's configuration, never by this server: each becomes an in-band
   problem that says what is wrong and, where it can, what to do. `-32603` stays for this
   server's own faults (`session.DatabaseUnavailable`).
2. Every SQLSTATE class PostgreSQL defines has a row (`CLASS_CONDITIONS`), and the codes whose
   meaning differs from their class's have their own (`CODE_CONDITIONS`); a class PostgreSQL
   adds later is the database's condition. A row names whose condition it is, the problem's
   code, whether the same call may simply be made again, and the advice.
3. A condition of the query echoes PostgreSQL's primary message, which names the caller's
   own objects and values; every message that names a host path is withheld. A condition of
   anything else is also logged on stderr, in one line, for the operator.
4. An error without a SQLSTATE is libpq's: the connection could not be made or was lost
   (`connection_lost`, `connection_failed`).
"""

import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import DeadlineExceeded, ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode, MetadataValue

__all__ = [
    "CLASS_CONDITIONS",
    "CODE_CONDITIONS",
    "MAX_ECHOED_MESSAGE_CHARS",
    "POOLING_ADVICE",
    "Cause",
    "Condition",
    "condition_failure",
    "connection_failed",
    "connection_lost",
    "echoable",
    "invalid_dsn_failure",
    "shared_session_failure",
    "superuser_failure",
]

logger = logging.getLogger(__name__)

# PostgreSQL messages echoed in problems are cut here: one line a model can read.
MAX_ECHOED_MESSAGE_CHARS: Final = 300

# An absolute path in a server message (file errors name them); such messages are not echoed.
_HOST_PATH: Final = re.compile(r"(?:^|[\s\"'(=:])/[\w.-]")


class Cause(StrEnum):
    """Whose condition an error is."""

    QUERY = "query"
    DATABASE = "database"
    CONNECTION = "connection"
    CONFIGURATION = "configuration"


@dataclass(frozen=True, slots=True)
class Condition:
    """One row of the table.

    Attributes:
        cause: Whose condition it is.
        what: What happened, as the start of the problem's detail.
        advice: What to do, a sentence (empty when the message says it all).
        retryable: The same call may succeed when made again.
        code: The problem's code.
    """

    cause: Cause
    what: str
    advice: str = ""
    retryable: bool = False
    code: MCPErrorCode = MCPErrorCode.INTERNAL_ERROR


_CHECK_CONFIG: Final = "Run mcp-server-suite --check-config to see the cause."
_RETRY: Final = "Retry the call."
_ASK_OPERATOR: Final = "The operator of the database can fix it; retrying will not."
# What a transaction or statement pooler in front of PostgreSQL does to the sessions.
POOLING_ADVICE: Final = (
    "MCP_SQL_DSN reaches PostgreSQL through a pooler that hands one server session to "
    "several clients (PgBouncer's pool_mode = transaction or statement), and read_only_sql "
    "needs a session of its own: point MCP_SQL_DSN at PostgreSQL itself or at a pool in "
    "session mode."
)


def _query(what: str = "PostgreSQL refused the query", advice: str = "") -> Condition:
    return Condition(Cause.QUERY, what, advice, code=MCPErrorCode.VALIDATION_ERROR)


_SESSION_ENDED: Final = Condition(
    Cause.CONNECTION,
    "PostgreSQL ended the database session",
    "It restarted, shut down or was told to end the session; the query was read-only and "
    "rolled back. " + _RETRY,
    retryable=True,
)

# Every class of PostgreSQL's Appendix A (errcodes.txt) that an error can carry.
CLASS_CONDITIONS: Final = {
    "03": _query(),  # SQL statement not yet complete
    "08": Condition(  # connection exception (08004: PostgreSQL refused the connection)
        Cause.CONNECTION,
        "The connection to PostgreSQL failed",
        "The query was read-only and rolled back. " + _RETRY,
        retryable=True,
    ),
    "09": _query(),  # triggered action exception
    "0A": _query(),  # feature not supported
    "0B": _query(),  # invalid transaction initiation
    "0F": _query(),  # locator exception
    "0L": _query(),  # invalid grantor
    "0P": _query(),  # invalid role specification
    "0Z": _query(),  # diagnostics exception
    "20": _query(),  # case not found
    "21": _query(),  # cardinality violation
    "22": _query(),  # data exception
    "23": _query(),  # integrity constraint violation
    "24": _query(),  # invalid cursor state
    "25": _query(),  # invalid transaction state
    # Invalid SQL statement name: the caller can name no prepared statement (the policy
    # refuses PREPARE and EXECUTE), so one of the session's own has gone: a pooler reset it.
    "26": Condition(Cause.CONFIGURATION, "The database session lost its state", POOLING_ADVICE),
    "27": _query(),  # triggered data change violation
    "28": Condition(  # invalid authorization specification
        Cause.CONFIGURATION,
        "PostgreSQL refused the login that MCP_SQL_DSN gives (user, password or pg_hba.conf)",
        "The operator must fix MCP_SQL_DSN or the server's authentication. " + _CHECK_CONFIG,
    ),
    "2B": _query(),  # dependent privilege descriptors still exist
    "2D": _query(),  # invalid transaction termination
    "2F": _query(),  # SQL routine exception
    "34": _query(),  # invalid cursor name
    "38": _query(),  # external routine exception
    "39": _query(),  # external routine invocation exception
    "3B": _query(),  # savepoint exception
    "3D": Condition(  # invalid catalog name: the DSN's database does not exist
        Cause.CONFIGURATION,
        "The database MCP_SQL_DSN names does not exist",
        "The operator must fix MCP_SQL_DSN. " + _CHECK_CONFIG,
    ),
    "3F": _query(advice="sql_schema lists the schemas the query may name."),  # invalid schema
    "40": Condition(  # transaction rollback: serialization failure, deadlock
        Cause.DATABASE,
        "PostgreSQL rolled the query back",
        "It conflicted with other work (on a hot standby, with the replay of changes from the "
        "primary). " + _RETRY,
        retryable=True,
    ),
    "42": _query(),  # syntax error or access rule violation
    "44": _query(),  # WITH CHECK OPTION violation
    "53": Condition(  # insufficient resources
        Cause.DATABASE,
        "PostgreSQL lacked the resources for the call",
        "Retry the call later.",
        retryable=True,
    ),
    "54": _query(),  # program limit exceeded
    # Object not in prerequisite state: `currval` before `nextval`, and the like (an
    # unpopulated materialized view is the database's: `_UNPOPULATED`).
    "55": _query(),
    "57": _SESSION_ENDED,  # operator intervention
    "58": Condition(  # system error: the server's own files or I/O
        Cause.DATABASE, "PostgreSQL failed with a system error", _ASK_OPERATOR
    ),
    "72": Condition(  # snapshot failure
        Cause.DATABASE, "PostgreSQL could no longer read its snapshot", _RETRY, retryable=True
    ),
    "F0": Condition(  # configuration file error
        Cause.DATABASE, "PostgreSQL's configuration failed", _ASK_OPERATOR
    ),
    "HV": Condition(  # foreign data wrapper error: the remote server of a foreign table
        Cause.DATABASE, "A foreign table's server failed", "Retry the call later.", True
    ),
    "P0": _query(),  # PL/pgSQL error: a function the query reached raised it
    "XX": Condition(  # internal error: PostgreSQL's own, or corrupted data
        Cause.DATABASE, "PostgreSQL reported an internal error", _ASK_OPERATOR
    ),
}

# The codes whose meaning differs from their class's.
CODE_CONDITIONS: Final = {
    "25006": Condition(  # read_only_sql_transaction
        Cause.QUERY, "PostgreSQL refused the query", code=MCPErrorCode.QUERY_VIOLATION
    ),
    "25P03": _SESSION_ENDED,  # idle_in_transaction_session_timeout
    "25P04": _SESSION_ENDED,  # transaction_timeout (PostgreSQL 17)
    "42501": Condition(  # insufficient_privilege
        Cause.QUERY, "PostgreSQL refused the query", code=MCPErrorCode.ACCESS_DENIED
    ),
    # The session's own prepared statement exists in a session that was just made: another
    # client made it, in a server session a pooler shares.
    "42P05": Condition(Cause.CONFIGURATION, "The database session is shared", POOLING_ADVICE),
    "53300": Condition(  # too_many_connections
        Cause.DATABASE,
        "PostgreSQL has no connection slot left for the role or the server",
        "Retry the call later; if it recurs, the operator can raise the role's CONNECTION "
        "LIMIT or max_connections, or lower MCP_SQL_POOL_MAX_SIZE.",
        retryable=True,
    ),
    "53400": _query(),  # configuration_limit_exceeded: temp_file_limit, by the query
    "55006": Condition(  # object_in_use
        Cause.DATABASE, "An object the query reads is in use", _RETRY, retryable=True
    ),
    "55P03": Condition(  # lock_not_available: lock_timeout
        Cause.DATABASE,
        "The query waited too long for a lock",
        "Other work holds the table; " + _RETRY,
        retryable=True,
        code=MCPErrorCode.EXECUTION_TIMEOUT,
    ),
    "57P03": Condition(  # cannot_connect_now: starting up, shutting down, in recovery
        Cause.CONNECTION,
        "PostgreSQL is not accepting connections now",
        "It is starting up or shutting down. Retry the call later.",
        retryable=True,
    ),
    "57P04": Condition(  # database_dropped
        Cause.CONFIGURATION,
        "The database MCP_SQL_DSN names was dropped",
        "The operator must fix MCP_SQL_DSN. " + _CHECK_CONFIG,
    ),
}


# A materialized view created WITH NO DATA (55000, "materialized view ... has not been
# populated"): the database's state, which only its owner can change.
_UNPOPULATED_MARK: Final = "has not been populated"
_UNPOPULATED: Final = Condition(
    Cause.DATABASE,
    "A materialized view the query reads was never populated",
    "It can be read once its owner runs REFRESH MATERIALIZED VIEW on it; retrying will not "
    "help until then.",
)


def echoable(message: str | None) -> str:
    """Return a PostgreSQL message quoted for a problem, or withheld if it names a host path.

    Args:
        message: The primary message, or None.
    """
    if not message or _HOST_PATH.search(message):
        return "(message withheld)"
    return quote(message, MAX_ECHOED_MESSAGE_CHARS)


def condition_failure(
    sqlstate: str, message: str | None, *, statement_timeout_ms: int, log: bool = True
) -> ToolFailure:
    """Return the in-band problem for an error PostgreSQL reported (Rules 1 to 3).

    Args:
        sqlstate: The error's SQLSTATE (five characters).
        message: PostgreSQL's primary message.
        statement_timeout_ms: The statement timeout in force, for the timeout message.
        log: Write the line for the operator on stderr (Rule 3).

    Returns:
        The problem; a `DeadlineExceeded` for the statement timeout.
    """
    metadata: dict[str, MetadataValue] = {"sqlstate": sqlstate}
    if sqlstate == "57014":
        seconds = statement_timeout_ms / 1000
        return DeadlineExceeded(
            f"The query ran longer than the {seconds:g} s statement timeout and was cancelled.",
            metadata={**metadata, "timeout_seconds": seconds},
        )
    condition = CODE_CONDITIONS.get(sqlstate) or CLASS_CONDITIONS.get(sqlstate[:2])
    if sqlstate == "55000" and message and _UNPOPULATED_MARK in message:
        condition = _UNPOPULATED
    if condition is None:
        condition = Condition(Cause.DATABASE, "PostgreSQL failed the call", _ASK_OPERATOR)
    detail = f"{condition.what} (SQLSTATE {sqlstate}): {echoable(message)}."
    if condition.advice:
        detail += " " + condition.advice
    return _failure(condition, detail, metadata, log=log)


def _failure(
    condition: Condition,
    detail: str,
    metadata: dict[str, MetadataValue],
    *,
    logged: str | None = None,
    log: bool = True,
) -> ToolFailure:
    if condition.cause is not Cause.QUERY:
        if log:
            # Rule 3: the operator reads the same line on stderr (or, given `logged`, one
            # that holds what the caller is not shown).
            logger.warning("read_only_sql: %s", logged or detail)
        metadata = {**metadata, "cause": str(condition.cause)}
    if condition.retryable:
        metadata = {**metadata, "retryable": True}
    return ToolFailure(
        detail,
        code=condition.code,
        invalid_params=("query",) if condition.cause is Cause.QUERY else (),
        metadata=metadata,
    )


def connection_lost(message: str | None) -> ToolFailure:
    """Return the problem for a connection libpq lost during a call (Rule 4).

    libpq's message names the server's host or socket: it goes to stderr only.

    Args:
        message: libpq's message.
    """
    return _connection_failure(
        "The connection to PostgreSQL was lost during the call. The query was read-only and "
        "rolled back, or never ran. " + _RETRY,
        message,
        log=True,
    )


def _connection_failure(detail: str, message: str | None, *, log: bool) -> ToolFailure:
    # The connection's condition: libpq's message is for the operator's line alone.
    return _failure(
        Condition(Cause.CONNECTION, "", retryable=True),
        detail,
        {},
        logged=f"{detail} ({_first_line(message) or 'no message'})",
        log=log,
    )


def connection_failed(
    message: str | None, sqlstate: str | None, *, log: bool = True
) -> ToolFailure:
    """Return the problem for a connection that could not be made (Rule 4).

    libpq's own message names the server's host or socket: it goes to stderr only.

    Args:
        message: libpq's message, or PostgreSQL's when it refused the login.
        sqlstate: PostgreSQL's SQLSTATE, when it answered.
        log: Write the line for the operator on stderr (Rule 3).
    """
    said = _SERVER_SAID.search(message or "")
    if said is not None and not sqlstate:
        # libpq keeps no SQLSTATE for a refused login: PostgreSQL's own message tells which
        # (in English, the default of lc_messages).
        text = said.group(1).strip()
        sqlstate = next(
            (code for code, marks in _LOGIN_REFUSALS if any(mark in text for mark in marks)),
            "08004",  # sqlserver_rejected_establishment_of_sqlconnection
        )
        message = text
    if sqlstate:
        return condition_failure(sqlstate, _first_line(message), statement_timeout_ms=0, log=log)
    return _connection_failure(
        "PostgreSQL could not be reached: check that it runs and that MCP_SQL_DSN names its "
        "host and port. " + _CHECK_CONFIG,
        message,
        log=log,
    )


# PostgreSQL's answer inside libpq's message for a connection it refused.
_SERVER_SAID: Final = re.compile(r"\b(?:FATAL|ERROR):\s+(.+)")
# What PostgreSQL says when it refuses a login, by the SQLSTATE it reported (libpq drops it),
# the narrower first: "too many connections for role" is no unknown role.
_LOGIN_REFUSALS: Final = (
    ("53300", ("too many connections", "too many clients", "connection slots")),
    ("57P03", ("the database system is",)),
    ("28P01", ("password authentication failed", "authentication failed")),
    ("28000", ("no pg_hba.conf entry", 'role "', "is not permitted to log in")),
    ("3D000", ('database "',)),
)


def shared_session_failure() -> ToolFailure:
    """Return the problem for a server session a pooler shares between clients."""
    return _failure(
        Condition(Cause.CONFIGURATION, ""),
        "The database session is shared with other clients. " + POOLING_ADVICE,
        {"pooling": "transaction"},
    )


def _first_line(message: str | None) -> str | None:
    # libpq's messages run over several lines ("connection to server ... failed: ...").
    if not message:
        return message
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else None


def superuser_failure() -> ToolFailure:
    """Return the problem for a DSN whose role is a superuser, which no call runs as."""
    return _failure(
        Condition(Cause.CONFIGURATION, ""),
        "MCP_SQL_DSN connects as a superuser, and read_only_sql runs no query as one: the "
        "operator must connect as a least-privilege role (scripts/least-privilege-role.sql). "
        + _CHECK_CONFIG,
        {},
    )


def invalid_dsn_failure() -> ToolFailure:
    """Return the problem for a DSN libpq cannot parse (whose error would quote it)."""
    return _failure(
        Condition(Cause.CONFIGURATION, ""),
        "MCP_SQL_DSN is not a valid connection string: the operator must fix it. " + _CHECK_CONFIG,
        {},
    )
