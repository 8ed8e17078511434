"""The tools, and the one function that decides which of them a session serves.

Each tool module is imported only when its tool is enabled, so a server without a DSN never
loads the SQL stack.
"""

from typing import Any

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolRegistry, ToolSpec

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
    specs: list[ToolSpec[Any, Any]] = []
    if settings.sql_dsn is not None:
        from mcp_server_suite.tools.sql import build_sql_tool  # noqa: PLC0415

        specs.append(build_sql_tool(settings))
    if settings.safe_data_dir is not None:
        from mcp_server_suite.tools.fs import build_fs_tool  # noqa: PLC0415

        specs.append(build_fs_tool(settings))
    if settings.metrics_enabled:
        from mcp_server_suite.tools.metrics import build_metrics_tool  # noqa: PLC0415

        specs.append(build_metrics_tool(settings))
    return ToolRegistry(specs)
