"""`read_only_sql`: one validated, row-capped SELECT against PostgreSQL.

Rules:

1. Importing this module loads nothing from the SQL stack: sqlglot, psycopg and psycopg_pool
   load on the first call (`sql_policy`, `sql_session`), so a server that never runs a query
   starts fast and small.
2. A call passes `check_untrusted_sql` before any connection is touched: the caller's text is
   parsed and checked (`sql_policy`), its outer LIMIT is rewritten, the SQL that runs is
   regenerated from the checked tree, and that SQL is parsed and checked a second time. It
   then runs in a read-only transaction that is always rolled back (`sql_session`). Each
   layer holds alone: `tests/unit/test_sql_layers.py` tests them one at a time.
3. The executed LIMIT allows one row more than the caller receives (`max_rows + 1`, or the
   query's own smaller literal limit), so `truncated` is exact: it is true only when that
   extra row exists, that is when the cap and not the query bounded the rows.
4. Operator-configured functions (`MCP_SQL_ALLOWED_FUNCTIONS`) never override the denylist: a
   denied name there stops the server at start-up.
"""

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams, ReadOnlySQLResult
from mcp_server_suite.tools.sql_functions import denial_reason
from mcp_server_suite.workers import run_blocking

if TYPE_CHECKING:
    from sqlglot import exp

    from mcp_server_suite.tools.sql_policy import FunctionPolicy
    from mcp_server_suite.tools.sql_session import ReadOnlyDatabase

__all__ = [
    "INLINE_POLICY_CHARS",
    "POLICY_CACHE_ENTRIES",
    "CheckedQuery",
    "PolicyDefect",
    "SQLTool",
    "build_sql_tool",
    "check_untrusted_sql",
]

DESCRIPTION: Final = (
    "Run one read-only PostgreSQL query (a SELECT, or a UNION, INTERSECT or EXCEPT of "
    "SELECTs) and return at most max_rows rows (50 at most) as JSON. Writes, several "
    "statements, bind parameters, row locks and functions with side effects are refused; only "
    "built-in functions known to be free of side effects may be called. truncated is true "
    "when more rows existed than were returned."
)

# Queries up to this length are checked on the event loop: parsing them takes well under a
# millisecond, less than handing them to a thread. Longer ones (the parser needs tens of
# milliseconds for 10,000 characters) are checked in a worker thread so that other calls
# keep moving.
INLINE_POLICY_CHARS: Final = 2_000

# The policy is a pure function of (query, max_rows) for one tool, so its answers for the most
# recent distinct queries are kept: clients repeat queries (polling, retries), and the policy
# is most of the server's work per call. 256 entries of at most 10,000 characters bound the
# cache to a few MiB.
POLICY_CACHE_ENTRIES: Final = 256

# sqlglot's reason for refusing to render a construct is echoed up to this length.
MAX_REASON_CHARS: Final = 200


@dataclass(frozen=True, slots=True)
class CheckedQuery:
    """A query that passed the policy twice, ready to run.

    Attributes:
        sql: The statement to execute, regenerated from the checked tree.
        limit: The row count of its outer LIMIT: the query's literal limit when it is at most
            `max_rows + 1`, otherwise `max_rows + 1`.
        max_rows: The most rows the caller receives.
    """

    sql: str
    limit: int
    max_rows: int


class PolicyDefect(RuntimeError):
    """The regenerated SQL lost what the policy put in it: a bug, never the caller's fault."""


def check_untrusted_sql(text: str, *, max_rows: int, functions: "FunctionPolicy") -> CheckedQuery:
    """Run the whole policy: parse, check, cap, regenerate, then parse and check again.

    Args:
        text: The untrusted query.
        max_rows: The most rows the caller receives (1 to 50).
        functions: The functions the query may call.

    Returns:
        The query to execute.

    Raises:
        ToolFailure: The query is refused (`MCP_QUERY_VIOLATION`) or cannot be parsed or
            reproduced (`MCP_VALIDATION_ERROR`).
        PolicyDefect: The regenerated SQL lost its row cap: a defect of the policy or of
            sqlglot, reported as an internal error.
    """
    from mcp_server_suite.tools.sql_policy import (  # noqa: PLC0415  # Rule 1.
        effective_limit,
        ensure_read_only,
        parse_untrusted_sql,
        stated_row_count,
    )

    root = parse_untrusted_sql(text)
    ensure_read_only(root, functions)
    effective = effective_limit(root, max_rows)
    executed = _render(root, effective)
    try:
        second = parse_untrusted_sql(executed)
        ensure_read_only(second, functions)
    except ToolFailure as exc:
        # sqlglot rendered something the policy refuses (odd argument lists of its own
        # function names do this). What would run is not what was checked, so nothing runs.
        raise _refused(
            "The query could not be reproduced faithfully: the SQL regenerated from it failed "
            f"the second check ({exc.problem.detail})"
        ) from None
    if stated_row_count(second.args.get("limit")) != effective:
        raise PolicyDefect("the regenerated SQL lost its row cap")
    return CheckedQuery(sql=executed, limit=effective, max_rows=max_rows)


def _render(root: "exp.Query", row_count: int) -> str:
    # Rewrites the outer LIMIT in place and regenerates the SQL that runs.
    from sqlglot.errors import SqlglotError  # noqa: PLC0415  # Rule 1.

    from mcp_server_suite.tools.sql_policy import (  # noqa: PLC0415  # Rule 1.
        RENDER_OPTIONS,
        limit_clause,
    )

    # The clause is built as a node: given a bare number, sqlglot would parse "LIMIT n" again.
    effective = limit_clause(row_count)
    try:
        return root.limit(effective, copy=False).sql(**RENDER_OPTIONS)
    except RecursionError:
        raise _refused("The query nests too deeply to be checked.") from None
    except SqlglotError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "unsupported construct"
        raise _refused(
            f"The query uses a construct the policy cannot reproduce exactly: "
            f"{quote(reason, MAX_REASON_CHARS)}"
        ) from None
    except Exception:  # noqa: BLE001  # sqlglot's generators fail on odd trees in any way; fail closed.
        raise _refused("The query uses a construct the policy cannot reproduce.") from None


def _refused(detail: str) -> ToolFailure:
    return ToolFailure(detail, code=MCPErrorCode.VALIDATION_ERROR, invalid_params=("query",))


class SQLTool:
    """The `read_only_sql` tool: the policy, and a database pool opened on the first call.

    Args:
        settings: The validated configuration; `sql_dsn` must be set.

    Raises:
        ConfigError: `sql_dsn` is unset.
    """

    def __init__(self, settings: Settings) -> None:
        if settings.sql_dsn is None:
            raise ConfigError("MCP_SQL_DSN", "a DSN to enable read_only_sql")
        self._settings: Final = settings
        self._dsn: Final = settings.sql_dsn
        self._database: ReadOnlyDatabase | None = None
        self._functions: FunctionPolicy | None = None
        self._opening: Final = asyncio.Lock()
        # Only queries that passed are kept: a refusal is recomputed, and cheap.
        self._checked: OrderedDict[tuple[str, int], CheckedQuery] = OrderedDict()

    async def run(self, params: ReadOnlySQLParams) -> ReadOnlySQLResult:
        """Check and run one query.

        Args:
            params: The validated arguments.

        Returns:
            The rows.

        Raises:
            ToolFailure: The policy or PostgreSQL refused the query, it timed out, its result
                is too large, or every connection stayed busy (in-band problems).
            DatabaseUnavailable: PostgreSQL could not be reached or failed (internal error).
        """
        checked = await self._check(params)
        database = await self._open()
        fetched = await database.run(checked)
        return ReadOnlySQLResult(
            columns=fetched.columns,
            rows=fetched.rows,
            row_count=len(fetched.rows),
            truncated=fetched.truncated,
        )

    async def _check(self, params: ReadOnlySQLParams) -> CheckedQuery:
        from mcp_server_suite.tools.sql_policy import FunctionPolicy  # noqa: PLC0415  # Rule 1.

        key = (params.query, params.max_rows)
        cached = self._checked.get(key)
        if cached is not None:
            self._checked.move_to_end(key)
            return cached
        if self._functions is None:
            self._functions = FunctionPolicy(extra=self._settings.sql_allowed_functions)
        if len(params.query) <= INLINE_POLICY_CHARS:
            checked = check_untrusted_sql(
                params.query, max_rows=params.max_rows, functions=self._functions
            )
        else:
            checked = await run_blocking(
                check_untrusted_sql,
                params.query,
                max_rows=params.max_rows,
                functions=self._functions,
            )
        self._checked[key] = checked
        if len(self._checked) > POLICY_CACHE_ENTRIES:
            self._checked.popitem(last=False)
        return checked

    async def _open(self) -> "ReadOnlyDatabase":
        async with self._opening:
            if self._database is None:
                from mcp_server_suite.tools.sql_session import (  # noqa: PLC0415  # Rule 1.
                    ReadOnlyDatabase,
                    SessionPins,
                )

                settings = self._settings
                database = ReadOnlyDatabase(
                    self._dsn.get_secret_value(),
                    pins=SessionPins(
                        schemas=settings.sql_schemas,
                        statement_timeout_ms=round(settings.sql_query_timeout * 1000),
                    ),
                    application_name=settings.sql_application_name,
                    connect_timeout=settings.sql_connect_timeout,
                    query_timeout=settings.sql_query_timeout,
                    pool_max_size=settings.sql_pool_max_size,
                )
                await database.open()
                self._database = database
            return self._database

    async def aclose(self) -> None:
        """Close the pool, if a call opened it."""
        async with self._opening:
            database, self._database = self._database, None
        if database is not None:
            await database.close()


def _ensure_not_denied(functions: frozenset[str]) -> None:
    for entry in sorted(functions):
        name = entry.rpartition(".")[2]
        if denial_reason(name) is not None:
            raise ConfigError(
                "MCP_SQL_ALLOWED_FUNCTIONS",
                "functions the denylist allows (it names functions that act outside a "
                "read-only transaction)",
                entry,
            )


def build_sql_tool(settings: Settings) -> ToolSpec[ReadOnlySQLParams, ReadOnlySQLResult]:
    """Describe `read_only_sql` for the configured database.

    Args:
        settings: The validated configuration.

    Returns:
        The tool; its pool is created on the first call and closed at shutdown.

    Raises:
        ConfigError: `sql_dsn` is unset, or `MCP_SQL_ALLOWED_FUNCTIONS` names a denied
            function.
    """
    _ensure_not_denied(settings.sql_allowed_functions)
    tool = SQLTool(settings)
    return ToolSpec(
        name="read_only_sql",
        title="Read-only SQL",
        description=DESCRIPTION,
        params_model=ReadOnlySQLParams,
        result_model=ReadOnlySQLResult,
        run=tool.run,
        close=tool.aclose,
    )
