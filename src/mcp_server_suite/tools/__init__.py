"""The tools, and the one function that decides which of them a session serves.

Tools are registered from their static descriptions (`catalog.json`) and loaded on their
first call, so start-up imports no tool's dependencies: not Pydantic, not psutil, and not
the SQL stack. What must be held from start-up is acquired here, before the session begins:
the sandbox root is opened now, so a root that cannot be opened stops the server at once.
"""

from typing import Any

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry, ToolSpec
from mcp_server_suite.tools.catalog import load_catalog
from mcp_server_suite.tools.fs.root import SandboxRoot, open_root

__all__ = ["build_registry"]


def build_registry(settings: Settings) -> ToolRegistry:
    """Build the registry of the tools the settings enable, in `tools/list` order.

    Args:
        settings: The validated configuration.

    Returns:
        The registry.

    Raises:
        ConfigError: A tool's resources could not be set up (for example, the sandbox root
            could not be opened).
    """
    catalog = load_catalog()
    tools: list[RegisteredTool] = []
    if settings.sql_dsn is not None:
        sql = _SQLLoader(settings)
        tools.append(RegisteredTool(catalog["read_only_sql"], lambda: sql.load("read_only_sql")))
        tools.append(RegisteredTool(catalog["sql_schema"], lambda: sql.load("sql_schema")))
    if settings.safe_data_dir is not None:
        # Both file tools read beneath one root descriptor; each releases its hold once.
        root = open_root(settings.safe_data_dir, holders=2)
        tools.append(
            RegisteredTool(
                catalog["sandbox_fs_read"],
                lambda: _load_fs_read(settings, root),
                release=root.close,
            )
        )
        tools.append(
            RegisteredTool(
                catalog["sandbox_fs_list"],
                lambda: _load_fs_list(settings, root),
                release=root.close,
            )
        )
    if settings.metrics_enabled:
        tools.append(RegisteredTool(catalog["system_metrics"], lambda: _load_metrics(settings)))
    return ToolRegistry(tools)


# The loaders import each tool's module on its first call; that is the point of them.


class _SQLLoader:
    # Both SQL tools are built on the first call of either, so that they share one pool.

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._specs: dict[str, ToolSpec[Any, Any]] | None = None

    def load(self, name: str) -> ToolSpec[Any, Any]:
        if self._specs is None:
            from mcp_server_suite.tools.sql import build_sql_tools  # noqa: PLC0415

            self._specs = build_sql_tools(self._settings)
        return self._specs[name]


def _load_fs_read(settings: Settings, root: SandboxRoot) -> ToolSpec[Any, Any]:
    from mcp_server_suite.tools.fs.read import build_read_tool  # noqa: PLC0415

    return build_read_tool(settings, root)


def _load_fs_list(settings: Settings, root: SandboxRoot) -> ToolSpec[Any, Any]:
    from mcp_server_suite.tools.fs.listing import build_list_tool  # noqa: PLC0415

    return build_list_tool(settings, root)


def _load_metrics(settings: Settings) -> ToolSpec[Any, Any]:
    from mcp_server_suite.tools.metrics import build_metrics_tool  # noqa: PLC0415

    return build_metrics_tool(settings)
