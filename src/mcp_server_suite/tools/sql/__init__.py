"""`read_only_sql` and `sql_schema`: PostgreSQL reads through layers that each hold alone.

The modules are the layers, in the order a call meets them:

1. `policy.py`: PostgreSQL's own parser, and allowlists over every node of its tree
   (`functions.py` holds the reviewed functions and the denylist).
2. `statement.py`: the statement that runs, with relations qualified from the catalog, bounded
   in rows and bytes, and proved equal to the checked tree by a second parse.
   `verifier.py` then has PostgreSQL resolve it without running it (`probe.py`), reads the
   tree it resolved to (`node_text.py`, `resolution.py`) and allows it only when every
   function, operator, type and relation in it is allowed on that server
   (`code_catalog.py`, `operator_functions.py`).
3. `role_audit.py`: what the role could run or create, audited when a connection is set up
   and guarded in every call's transaction.
4. `session.py`: the pool, its pinned sessions (`search_path` of trusted schemas only) and one
   read-only, rolled-back round trip per call.
5. `values.py`: PostgreSQL values as JSON, within the response bound.

`tool.py` runs a call through them; `schema_tool.py` is `sql_schema`. Importing this package
loads none of pglast, psycopg or Pydantic: the builders below import their modules when
called, and `config.py` reads `functions.py` (data only) to validate the configuration.
"""

from typing import TYPE_CHECKING, Any

from mcp_server_suite.config import ConfigError, Settings

if TYPE_CHECKING:
    from mcp_server_suite.core.registry import ToolSpec
    from mcp_server_suite.schemas.sql import ReadOnlySQLParams, ReadOnlySQLResult

__all__ = ["build_sql_tool", "build_sql_tools"]


def build_sql_tools(settings: Settings) -> "dict[str, ToolSpec[Any, Any]]":
    """Describe `read_only_sql` and `sql_schema`, which share one connection pool.

    Args:
        settings: The validated configuration.

    Returns:
        Both tools, by name; the pool is created on the first call of either and closed at
        shutdown (closing it twice is harmless).

    Raises:
        ConfigError: `sql_dsn` is unset.
    """
    from mcp_server_suite.core.registry import ToolSpec  # noqa: PLC0415  # Loads Pydantic.
    from mcp_server_suite.schemas.sql import (  # noqa: PLC0415
        ReadOnlySQLParams,
        ReadOnlySQLResult,
        SQLSchemaParams,
        SQLSchemaResult,
    )
    from mcp_server_suite.tools.sql import schema_tool, tool  # noqa: PLC0415

    if settings.sql_dsn is None:
        raise ConfigError("MCP_SQL_DSN", "a DSN to enable read_only_sql")
    sql_tool = tool.SQLTool(settings)
    schema = schema_tool.SchemaTool(sql_tool)
    return {
        "read_only_sql": ToolSpec(
            name="read_only_sql",
            title="Read-only SQL",
            description=tool.DESCRIPTION,
            params_model=ReadOnlySQLParams,
            result_model=ReadOnlySQLResult,
            run=sql_tool.run,
            run_checked=sql_tool.run_checked,
            close=sql_tool.aclose,
        ),
        "sql_schema": ToolSpec(
            name="sql_schema",
            title="SQL schema",
            description=schema_tool.DESCRIPTION,
            params_model=SQLSchemaParams,
            result_model=SQLSchemaResult,
            run=schema.run,
            close=sql_tool.aclose,
        ),
    }


def build_sql_tool(settings: Settings) -> "ToolSpec[ReadOnlySQLParams, ReadOnlySQLResult]":
    """Describe `read_only_sql` alone (see `build_sql_tools`).

    Raises:
        ConfigError: `sql_dsn` is unset.
    """
    spec: ToolSpec[ReadOnlySQLParams, ReadOnlySQLResult] = build_sql_tools(settings)[
        "read_only_sql"
    ]
    return spec
