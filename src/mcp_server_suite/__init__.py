"""mcp-server-suite: a hardened MCP server over stdio with three narrowly scoped tools."""

__all__ = ["SERVER_NAME", "SERVER_TITLE", "__version__"]

__version__ = "0.1.0"

# The identity reported in serverInfo; kept here so the CLI and the protocol agree.
SERVER_NAME = "mcp-server-suite"
SERVER_TITLE = "MCP Server Suite"
