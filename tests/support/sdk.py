"""Driving the real server with the official MCP SDK's stdio client.

`mcp` is imported inside the function, so modules that use this for one interop test can
still be collected where the SDK is not installed (the Nix build deselects those tests).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from tests.support.harness import REPO_ROOT, base_environment

__all__ = ["sdk_session"]

# The SDK's own connect probe and timeouts fit well inside this.
SESSION_TIMEOUT_S = 60.0


def sdk_session(
    env: Mapping[str, str], calls: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[Any, list[Any]]:
    """Connect with `ClientSession` over `stdio_client`, list the tools and make the calls.

    Args:
        env: Variables for the server, on top of the harness's minimal environment (the SDK
            passes the server only the environment it is given).
        calls: (tool name, arguments) pairs, called in order.

    Returns:
        The `tools/list` result and each call's `CallToolResult`, as the SDK parsed them.
    """
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-X", "dev", "-m", "mcp_server_suite"],
        env=base_environment(env),
        cwd=REPO_ROOT,
    )

    async def session() -> tuple[Any, list[Any]]:
        with tempfile.TemporaryFile("w+") as errlog:
            async with (
                stdio_client(parameters, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                listed = await client.list_tools()
                results = [
                    await client.call_tool(name, dict(arguments)) for name, arguments in calls
                ]
            return listed, results

    return asyncio.run(asyncio.wait_for(session(), timeout=SESSION_TIMEOUT_S))
