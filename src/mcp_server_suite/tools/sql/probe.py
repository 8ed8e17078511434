"""How PostgreSQL resolves a query, asked without running it: one rolled-back round trip.

Rules:

1. The probe is one libpq pipeline ended by one Sync on a pooled, pinned session: `BEGIN
   TRANSACTION READ ONLY`, the role audit's full guard (as every read runs it), one
   statement that sets `debug_pretty_print = off`, `client_min_messages = log` and then
   `debug_print_rewritten = on` for the transaction alone, the query as the unnamed
   statement's Parse message alone, `ROLLBACK`, and the read-back of the session's pins
   (`session.py`). Parse runs parse analysis and rewriting,
   which print the tree, and executes nothing: no Bind, no Execute, no planning. What
   analysis runs is what the query's constants need: each constant's type input function
   (`'x'::type`), under the session's statement timeout.
2. The tree arrives as a LOG notice, "rewritten parse tree:", whose detail is the tree's
   node text cut into lines (`node_text.py`). The notices are read raw from libpq while
   the pipeline runs; the one tree of a SELECT (`commandType 1`) is the query's (the
   ROLLBACK prints a utility statement's, which is ignored). Anything else (no such tree,
   two) is a refusal, never a guess.
3. The settings are transaction-local: the ROLLBACK restores them, and the read-back proves
   the session's pins after it, so the connection goes back to the pool as a read leaves
   it. A failed step leaves the transaction aborted; it is
   rolled back, and the pins read back, in a second round trip, as for a failed read.
4. PostgreSQL writes every LOG message to the server log as well, whatever the client
   asks (a role cannot change `log_min_messages`): each probe writes its tree there, with
   the statement. Measured on PostgreSQL 15 and 18: 2.3 to 2.6 KB for `SELECT 1 + 2`, 3.1 to
   3.6 KB for a query of one table, 4.8 KB for a view over it, 29 to 34 KB for
   `pg_stat_activity` and 182 to 218 KB for `information_schema.columns`.
   `debug_pretty_print = off` cuts that by 37 to 59 % (2,000 bytes of tree instead of
   3,182; 178,717 instead of 437,205). The probe runs once per query shape and catalog
   reading (`verifier.py`), never on the cached path. An operator who wants none of it in
   the log can, as a superuser, `ALTER ROLE <reader> SET log_min_messages = fatal` (LOG
   ranks above ERROR in the server log, so `warning` or `error` still write it; `fatal`
   also keeps the role's failed queries out of the log).
"""

from typing import Any, Final

from psycopg import AsyncConnection
from psycopg.adapt import Transformer
from psycopg.pq import DiagnosticField
from psycopg.pq.abc import PGresult

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.node_text import NodeTextError, unwrap_node_dump
from mcp_server_suite.tools.sql.session import (
    _BEGIN,
    _COMPLETED,
    _GUARD_INDEX,
    _READ_BACK_STATEMENT,
    _ROLLBACK,
    ParseOnly,
    SessionPins,
    _end_aborted,
    _ensure_completed,
    _guard_refused,
    _GuardRefusedError,
    _load_rows,
    _Prepared,
    _round_trip,
    translate_database_error,
)

__all__ = ["PROBE_SETTINGS", "TREE_MESSAGE", "resolve_tree"]

# The one statement that turns the tree's printing on for the transaction alone (Rule 1):
# pretty printing off (half the bytes), LOG messages sent to the client, and the printing
# itself last, so that this statement's own tree is not printed.
PROBE_SETTINGS: Final = (
    b"SELECT pg_catalog.set_config('debug_pretty_print', 'off', true), "
    b"pg_catalog.set_config('client_min_messages', 'log', true), "
    b"pg_catalog.set_config('debug_print_rewritten', 'on', true)"
)
# The primary message of the notice that carries the tree (Rule 2).
TREE_MESSAGE: Final = b"rewritten parse tree:"
# The opening of a SELECT's tree as `format_node_dump()` writes it.
_SELECT_TREE: Final = b"({QUERY :commandType 1 "
# Server encodings whose bytes reach the client unchanged (the client's is UTF8).
_EXACT_ENCODINGS: Final = frozenset({b"UTF8", b"SQL_ASCII"})


def _unverifiable(detail: str) -> ToolFailure:
    return ToolFailure(
        f"The query could not be checked as PostgreSQL resolves it: {detail}.",
        code=MCPErrorCode.QUERY_VIOLATION,
        invalid_params=("query",),
    )


async def resolve_tree(
    conn: AsyncConnection[Any],
    query: str,
    *,
    pins: SessionPins,
    guard: _Prepared,
    client_timeout: float,
) -> bytes:
    """Have PostgreSQL analyse and rewrite a query, and return the tree it printed (Rules 1-3).

    Args:
        conn: An idle pooled connection whose pins hold.
        query: The query as it would run.
        pins: The session's pins.
        guard: The role audit's full guard, as every read sends it.
        client_timeout: Seconds after which the client cancels on its own.

    Returns:
        The tree as node text, its line breaks undone (`node_text.unwrap_node_dump`).

    Raises:
        ToolFailure: PostgreSQL refused the query (parse analysis failed), it timed out, or
            no single tree arrived (in-band).
        DatabaseUnavailable: The connection or the session's state failed.
    """
    statement_timeout_ms = pins.statement_timeout_ms
    trees: list[bytes] = []
    pgconn = conn.pgconn
    previous = pgconn.notice_handler

    def keep(result: PGresult) -> None:
        if result.error_field(DiagnosticField.MESSAGE_PRIMARY) == TREE_MESSAGE:
            trees.append(result.error_field(DiagnosticField.MESSAGE_DETAIL) or b"")
        # psycopg installs its own notice handler on every connection it opens, so there
        # is always one to pass other notices to; the test keeps libpq's optional type.
        elif previous is not None:  # pragma: no branch
            previous(result)

    pgconn.notice_handler = keep
    try:
        results = await _round_trip(
            conn,
            (
                _BEGIN,
                guard,
                PROBE_SETTINGS,
                ParseOnly(query.encode(conn.info.encoding)),
                _ROLLBACK,
                _READ_BACK_STATEMENT,
            ),
            client_timeout=client_timeout,
            statement_timeout_ms=statement_timeout_ms,
            # The probe runs nothing that outlives its transaction, so a session that ended
            # under it may be given the probe again on another connection (session.py Rule 8).
            resend_safe=True,
        )
    finally:
        pgconn.notice_handler = previous
    failed = next(
        (index for index, result in enumerate(results) if result.status not in _COMPLETED), None
    )
    if failed is None:
        # Rule 3: the transaction ended, and the pins are read back as after a read.
        _ensure_completed(results[-2:])
        read_back = _load_rows(Transformer(conn), results[-1])
        pins.ensure_read_back(read_back[0] if read_back else None)
    else:
        await _end_aborted(
            conn, pins, client_timeout=client_timeout, statement_timeout_ms=statement_timeout_ms
        )
        if failed == _GUARD_INDEX and _guard_refused(results[failed]):
            raise _GuardRefusedError
        _raise_failure(conn, results[failed], statement_timeout_ms)
    selects = [tree for tree in trees if tree.startswith(_SELECT_TREE)]
    # PostgreSQL 15 to 18 print exactly one rewritten tree for the Parse of a SELECT (the
    # settings are the transaction's, and the policy passes one SELECT only), so no server
    # of theirs reaches this refusal; it stands for a server that describes a query
    # otherwise, which is refused rather than guessed at (Rule 2).
    if len(selects) != 1:  # pragma: no cover
        raise _unverifiable("PostgreSQL did not describe it")
    encoding = pgconn.parameter_status(b"server_encoding") or b""
    try:
        return unwrap_node_dump(selects[0], exact_lengths=encoding in _EXACT_ENCODINGS)
    except NodeTextError as exc:
        raise _unverifiable(str(exc)) from None


def _raise_failure(conn: AsyncConnection[Any], result: PGresult, statement_timeout_ms: int) -> None:
    # The probe's failed step, as the in-band problem (or internal error) a read would give.
    # It is the first result that did not complete: libpq answers a pipeline in order and
    # marks PIPELINE_ABORTED only the statements after the one whose error aborted it.
    from psycopg.errors import error_from_result  # noqa: PLC0415  # Failure path only.

    error = error_from_result(result, encoding=conn.info.encoding)
    problem = translate_database_error(error, statement_timeout_ms)
    raise problem from error
