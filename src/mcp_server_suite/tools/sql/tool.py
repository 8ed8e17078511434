"""`read_only_sql`: one checked, bounded read against PostgreSQL, through every layer in turn.

Rules:

1. Importing this module loads nothing from the SQL stack: pglast, psycopg and psycopg_pool
   load on the first call (`policy`, `statement`, `session`), so a server that never runs a
   query starts fast and small.
2. A call meets the layers in the order of the package's files: the policy refuses what it
   forbids before any connection is touched (`policy.py`); the statement that runs is the
   checked one with its relations and types qualified from the catalog, bounded in rows and
   bytes, and proved by a second parse (`statement.py`); what PostgreSQL resolves it to is
   checked before it first runs (`verifier.py`); the role audit refuses while the role could
   run untrusted code (`role_audit.py`); the read runs in a read-only transaction that is
   always rolled back, on a session whose `search_path` holds trusted schemas only
   (`session.py`); values become JSON within the response bound (`values.py`).
3. The checked statement is a pure function of (query, max_rows, catalog), so the statements
   of the most recent distinct calls are kept until the catalog is read again. So are the
   shapes of the most recent statements checked (`statement.py`, Rule 5): a query of a shape
   checked before, whose constants alone differ, is parsed by PostgreSQL's grammar to find
   its shape, and its statement is built from that parse without walking it again. Shapes
   are kept by `verifier.verdict_key` (the shape and what of its constants can change how
   PostgreSQL resolves it), and only once their resolved tree passed: the cached path asks
   PostgreSQL nothing more.
5. `SHOW name` runs as `SELECT pg_catalog.current_setting('name') AS name`: the same value,
   checked as any query is (`SHOW ALL` is refused: `pg_settings` lists every setting).
4. A call arrives by `run_checked` (the registry's rule 7): its arguments are validated as
   they arrived and its result checked against `ReadOnlySQLResult` once, as JSON data, then
   written as JSON text by the model's own serializer, which is what the generic path's
   round trips through JSON text produce, at half the cost. `run` is the generic path.
"""

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import ValidationError

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.core.registry import OutputContractError, ToolOutput, accept_arguments
from mcp_server_suite.schemas.sql import ReadOnlySQLParams, ReadOnlySQLResult
from mcp_server_suite.workers import run_blocking

if TYPE_CHECKING:
    from mcp_server_suite.tools.sql.policy import CheckedTree, FunctionPolicy
    from mcp_server_suite.tools.sql.role_audit import TrustedCode
    from mcp_server_suite.tools.sql.session import FetchedRows, ReadOnlyDatabase
    from mcp_server_suite.tools.sql.statement import ExecutableStatement, RelationCatalog
    from mcp_server_suite.tools.sql.verifier import CodeVerifier

__all__ = [
    "DESCRIPTION",
    "INLINE_POLICY_CHARS",
    "POLICY_CACHE_ENTRIES",
    "SQLTool",
    "check_untrusted_sql",
    "result_output",
    "trusted_code",
]

DESCRIPTION: Final = (
    "Run one read-only PostgreSQL query (a SELECT, VALUES or TABLE, a UNION, INTERSECT or "
    "EXCEPT of them, or a plain EXPLAIN of one) and return at most max_rows rows (50 at "
    "most) as JSON. Writes, several statements, bind parameters, row locks and functions "
    "with side effects are refused; only built-in functions known to be free of side "
    "effects may be called. Unqualified tables are looked up in the configured schemas; use "
    "sql_schema to list them. truncated is true when more rows existed than were returned, "
    "and truncated_reason says which bound (max_rows or max_result_bytes) ended them."
)

# Queries up to this length are checked on the event loop: PostgreSQL's parser reads them in
# microseconds, far less than handing them to a thread. Longer ones are checked in a worker
# thread so that other calls keep moving.
INLINE_POLICY_CHARS: Final = 2_000

# The statements of the most recent distinct calls are kept (Rule 3): clients repeat
# queries (polling, retries). 256 entries of at most 10,000 characters bound the cache to a
# few MiB. As many shapes are kept, of queries up to INLINE_POLICY_CHARS only (a shape is
# about ten times its query's length): a few MiB more.
POLICY_CACHE_ENTRIES: Final = 256


def trusted_code(settings: Settings) -> "TrustedCode":
    """Return what the settings trust, for the role audit.

    Args:
        settings: The validated configuration.
    """
    from mcp_server_suite.tools.sql.role_audit import TrustedCode  # noqa: PLC0415  # Rule 1.

    return TrustedCode(
        schemas=settings.sql_schemas,
        extensions=settings.sql_trusted_extensions,
        functions=tuple(sorted(name for name in settings.sql_allowed_functions if "." in name)),
        pool_max_size=settings.sql_pool_max_size,
    )


def check_untrusted_sql(
    text: str, *, functions: "FunctionPolicy", schemas: tuple[str, ...]
) -> "CheckedTree":
    """Run the policy alone: parse the text and check its tree (`policy.py`).

    Args:
        text: The untrusted query.
        functions: The functions the query may call.
        schemas: `MCP_SQL_SCHEMAS`.

    Returns:
        The checked statement, its relations not yet qualified.

    Raises:
        ToolFailure: The query is refused (`MCP_QUERY_VIOLATION`) or cannot be parsed
            (`MCP_VALIDATION_ERROR`).
    """
    from mcp_server_suite.tools.sql.policy import (  # noqa: PLC0415  # Rule 1.
        check_untrusted_tree,
        parse_untrusted_sql,
        show_as_select,
    )

    statement = parse_untrusted_sql(text)
    if statement.root == "VariableShowStmt":
        # `SHOW name` is `current_setting('name')`, which a query may call (Rule 5).
        statement = parse_untrusted_sql(show_as_select(statement))
    return check_untrusted_tree(statement, functions, schemas=schemas)


def _result_fields(fetched: "FetchedRows") -> dict[str, Any]:
    # The result's members, in the model's order, as JSON data.
    return {
        "columns": fetched.columns,
        "rows": fetched.rows,
        "row_count": len(fetched.rows),
        "truncated": fetched.truncated,
        "truncated_reason": fetched.truncated_reason,
    }


def result_output(fetched: "FetchedRows") -> ToolOutput:
    """Check a read's result against `ReadOnlySQLResult` and render it (Rule 4).

    The rows are JSON data already (`values.py`), so the members checked are the
    `structuredContent` as they are, and the text is the checked model's own JSON.

    Args:
        fetched: The rows of one read.

    Returns:
        The result as JSON data and as the same JSON text.

    Raises:
        OutputContractError: The result breaks its model: a bug in the tool.
    """
    fields = _result_fields(fetched)
    try:
        checked = ReadOnlySQLResult.__pydantic_validator__.validate_python(fields)
    except ValidationError as exc:
        raise OutputContractError("result breaks the ReadOnlySQLResult contract") from exc
    return ToolOutput(fields, checked.model_dump_json())


K = TypeVar("K")
V = TypeVar("V")


def _remember(cache: "OrderedDict[K, V]", key: "K", value: "V") -> None:
    # Keeps the most recent POLICY_CACHE_ENTRIES entries (Rule 3).
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > POLICY_CACHE_ENTRIES:
        cache.popitem(last=False)


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
        # Only statements that passed are kept, for the catalog they were built with.
        self._checked: OrderedDict[tuple[str, int], ExecutableStatement] = OrderedDict()
        # The statements built for the most recent shapes (Rule 3), for the same catalog.
        self._shapes: OrderedDict[str, ExecutableStatement] = OrderedDict()
        self._checked_for: RelationCatalog | None = None
        self._verifier: CodeVerifier | None = None

    async def run(self, params: ReadOnlySQLParams) -> ReadOnlySQLResult:
        """Check and run one query.

        Args:
            params: The validated arguments.

        Returns:
            The rows.

        Raises:
            ToolFailure: The policy, the role audit or PostgreSQL refused the query, it timed
                out, its first row is too large, or every connection stayed busy (in-band).
            DatabaseUnavailable: PostgreSQL could not be reached or failed (internal error).
        """
        return ReadOnlySQLResult.model_validate(_result_fields(await self._fetch(params)))

    async def run_checked(self, arguments: Mapping[str, Any]) -> ToolOutput | None:
        """Check and run one query, from the arguments as they arrived (Rule 4).

        Args:
            arguments: The sanitized arguments.

        Returns:
            The checked output, or None when the arguments break `ReadOnlySQLParams` (the
            generic path then names the faults).

        Raises:
            ToolFailure: As `run`.
            DatabaseUnavailable: As `run`.
            OutputContractError: The result breaks its model: a bug in the tool.
        """
        params = accept_arguments(ReadOnlySQLParams, arguments)
        if params is None:
            return None
        return result_output(await self._fetch(params))

    async def _fetch(self, params: ReadOnlySQLParams) -> "FetchedRows":
        statement = await self._check(params)
        database = await self._database_or_open()
        return await database.run(statement)

    async def _check(self, params: ReadOnlySQLParams) -> "ExecutableStatement":
        from mcp_server_suite.tools.sql.policy import FunctionPolicy  # noqa: PLC0415  # Rule 1.
        from mcp_server_suite.tools.sql.statement import (  # noqa: PLC0415  # Rule 1.
            render_statement,
        )
        from mcp_server_suite.tools.sql.verifier import (  # noqa: PLC0415  # Rule 1.
            CodeVerifier,
            verdict_key,
        )

        key = (params.query, params.max_rows)
        database = self._database
        if database is not None:
            catalog = await database.catalog()
            # What was kept holds for the catalog it was built with only.
            current = self._checked_for is catalog
            cached = (self._checked.get(key) or self._same_shape(params)) if current else None
            if cached is not None:
                _remember(self._checked, key, cached)
                return cached
        if self._functions is None:
            self._functions = FunctionPolicy(extra=self._settings.sql_allowed_functions)
        functions = self._functions
        schemas = self._settings.sql_schemas
        long_query = len(params.query) > INLINE_POLICY_CHARS
        # The policy refuses before any connection is touched (Rule 2).
        if long_query:
            checked = await run_blocking(
                check_untrusted_sql, params.query, functions=functions, schemas=schemas
            )
        else:
            checked = check_untrusted_sql(params.query, functions=functions, schemas=schemas)
        database = await self._database_or_open()
        catalog = await database.catalog()

        def complete(catalog: "RelationCatalog") -> bool:
            return all(
                ref.name in catalog or ref.name in checked.ctes for ref in checked.relations
            ) and all(catalog.has_type(ref.name) for ref in checked.types)

        if not complete(catalog):
            # A relation or type the catalog does not hold may have been created since it was
            # read.
            catalog = await database.catalog(missing=True)
        # The statement that runs is built from the tree checked above: the policy runs once.
        render = functools.partial(
            render_statement,
            checked,
            catalog,
            max_rows=params.max_rows,
            max_result_bytes=self._settings.sql_max_result_bytes,
        )
        statement = await run_blocking(render) if long_query else render()
        # Rule 2: what PostgreSQL resolves the statement to is checked before it ever runs.
        if self._verifier is None:
            self._verifier = CodeVerifier(
                trusted_code(self._settings), self._settings.sql_allowed_functions
            )
        await self._verifier.ensure_verified(database, statement, catalog)
        if self._checked_for is not catalog:
            self._checked.clear()
            self._shapes.clear()
            self._checked_for = catalog
        _remember(self._checked, key, statement)
        if checked.explain_format is None and not long_query and complete(catalog):
            # A shape whose relations and types were all found: a query that names one not
            # found yet takes the full path, which reads the catalog again for it.
            _remember(self._shapes, verdict_key(checked.statement.tree), statement)
        return statement

    def _same_shape(self, params: ReadOnlySQLParams) -> "ExecutableStatement | None":
        # The statement for a query whose shape was checked with the current catalog (Rule 3),
        # or None. It never refuses: a query that does not parse takes the full path, which
        # says why.
        from mcp_server_suite.schemas.errors import ToolFailure  # noqa: PLC0415
        from mcp_server_suite.tools.sql.policy import parse_tree_text  # noqa: PLC0415  # Rule 1.
        from mcp_server_suite.tools.sql.statement import (  # noqa: PLC0415  # Rule 1.
            render_same_shape,
        )
        from mcp_server_suite.tools.sql.verifier import verdict_key  # noqa: PLC0415  # Rule 1.

        if not self._shapes or len(params.query) > INLINE_POLICY_CHARS:
            return None
        try:
            tree = parse_tree_text(params.query)
        except ToolFailure:
            return None
        shape = verdict_key(tree)
        like = self._shapes.get(shape)
        if like is None:
            return None
        self._shapes.move_to_end(shape)
        return render_same_shape(
            params.query,
            tree,
            like,
            max_rows=params.max_rows,
            max_result_bytes=self._settings.sql_max_result_bytes,
        )

    @property
    def schemas(self) -> tuple[str, ...]:
        """`MCP_SQL_SCHEMAS`, in search order."""
        return self._settings.sql_schemas

    @property
    def max_result_bytes(self) -> int:
        """`MCP_SQL_MAX_RESULT_BYTES`."""
        return self._settings.sql_max_result_bytes

    async def database(self) -> "ReadOnlyDatabase":
        """The database, whose pool is opened by the first call that needs it."""
        return await self._database_or_open()

    async def _database_or_open(self) -> "ReadOnlyDatabase":
        async with self._opening:
            if self._database is None:
                from mcp_server_suite.tools.sql.session import (  # noqa: PLC0415  # Rule 1.
                    ReadOnlyDatabase,
                )

                settings = self._settings
                database = ReadOnlyDatabase(
                    self._dsn.get_secret_value(),
                    trusted=trusted_code(settings),
                    statement_timeout_ms=max(1, round(settings.sql_query_timeout * 1000)),
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
