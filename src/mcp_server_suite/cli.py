"""Command-line options, and the operator-facing summary of `--check-config`."""

import argparse
from collections.abc import Sequence

from mcp_server_suite import SERVER_NAME, __version__
from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolRegistry

__all__ = ["describe_configuration", "parse_arguments"]

_DESCRIPTION = """\
A hardened Model Context Protocol server. It speaks JSON-RPC 2.0 over stdin and stdout,
one message per line, and is configured only through MCP_* environment variables."""

_EPILOG = """\
tools:
  read_only_sql     enabled by MCP_SQL_DSN or MCP_SQL_DSN_FILE
  sandbox_fs_read   enabled by MCP_SAFE_DATA_DIR
  system_metrics    enabled unless MCP_METRICS_ENABLED=false

Logs go to stderr (MCP_SERVER_SUITE_LOG_LEVEL). Exit status 78 means invalid configuration."""


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line; `--help` and `--version` print and exit here."""
    parser = argparse.ArgumentParser(
        prog=SERVER_NAME,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration, print which tools would be served, and exit",
    )
    return parser.parse_args(argv)


def describe_configuration(settings: Settings, registry: ToolRegistry) -> str:
    """Summarise a valid configuration for an operator; the DSN is never shown."""
    reasons = {
        "read_only_sql": "MCP_SQL_DSN and MCP_SQL_DSN_FILE are unset",
        "sandbox_fs_read": "MCP_SAFE_DATA_DIR is unset",
        "system_metrics": "MCP_METRICS_ENABLED is false",
    }
    lines = ["configuration: valid"]
    for name, reason in reasons.items():
        lines.append(f"  {name}: {'enabled' if name in registry else 'disabled (' + reason + ')'}")
    lines.append(
        f"  limits: {settings.max_concurrent_tools} concurrent calls, "
        f"{settings.tool_timeout_seconds:g} s deadline, "
        f"{settings.tool_acquire_timeout_seconds:g} s slot wait"
    )
    return "\n".join(lines)
