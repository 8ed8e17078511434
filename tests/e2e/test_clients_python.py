"""The official Python SDK's high-level `Client` (`mcp` 2.x) against the real server.

`Client(server, mode=...)` is how an application connects with the SDK:
- `mode="auto"` (the default) probes `server/discover` at the newest modern revision and
  falls back to `initialize` on any error but a recognised modern one; against this server it
  must settle on 2026-07-28, which also proves the probe was answered (a timed-out probe
  falls back to the handshake);
- `mode="2026-07-28"` adopts that revision without a probe;
- `mode="legacy"` runs the 2025-11-25 handshake (the SDK offers no other pin of a handshake
  revision: `initialize` always asks for the newest).

Each lists the tools and makes the calls of `tests.support.clients.CALLS`.
`ClientSession.call_tool` re-validates every successful result's `structuredContent` against
the listed `outputSchema`, and a negative control shows that check is live in each era.
`tests/e2e/test_sdk_interop.py` covers the low-level `ClientSession` path. The SDK is
imported inside the functions, so the module can be collected where it is not installed (the
Nix build deselects the interop tests).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite import SERVER_NAME, __version__
from tests.support.clients import (
    CALLS,
    LEGACY_VERSION,
    Era,
    check_session,
    check_wire,
    make_sandbox,
    server_command,
)
from tests.support.harness import REPO_ROOT, base_environment
from tests.support.wire_schema import MODERN_VERSION

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

# A session is well under a second; only a hang comes near this.
SESSION_TIMEOUT_S = 60.0

# The SDK's `mode` argument for each era, and the revision it must end up speaking.
MODES: dict[Era, tuple[str, str]] = {
    "auto": ("auto", MODERN_VERSION),
    "modern": (MODERN_VERSION, MODERN_VERSION),
    "legacy": ("legacy", LEGACY_VERSION),
}


def wire_json(model: Any) -> dict[str, Any]:
    """A parsed SDK model back in its wire form (camelCase members, absent ones left out)."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


async def session(parameters: Any, mode: str, errlog: Any) -> dict[str, Any]:
    import mcp_types
    from mcp.client import Client
    from mcp.client.stdio import stdio_client

    # The SDK's stdio transport, given directly so that the server's stderr can be read.
    async with Client(stdio_client(parameters, errlog=errlog), mode=mode) as client:
        listing = await client.list_tools()
        results = [await client.call_tool(name, arguments) for name, arguments in CALLS]
        # The validation is live: a result that breaks the listed schema is refused.
        broken = mcp_types.CallToolResult(content=[], structured_content={"content": 1})
        with pytest.raises(RuntimeError, match="Invalid structured content"):
            await client.session.validate_tool_result("sandbox_fs_read", broken)
        return {
            "version": client.protocol_version,
            "server_info": client.server_info,
            "tools": [wire_json(tool) for tool in listing.tools],
            "results": [wire_json(result) for result in results],
        }


@pytest.mark.parametrize("era", list(MODES))
def test_python_sdk_client(era: Era, tmp_path: Path) -> None:
    from mcp import StdioServerParameters

    mode, version = MODES[era]
    sandbox = make_sandbox(tmp_path)
    command = server_command(sandbox)
    parameters = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env=base_environment(sandbox.server_environment()),
        cwd=REPO_ROOT,
    )
    with tempfile.TemporaryFile("w+") as errlog:
        seen = asyncio.run(asyncio.wait_for(session(parameters, mode, errlog), SESSION_TIMEOUT_S))
        errlog.seek(0)
        stderr = errlog.read()
    assert "Traceback" not in stderr, stderr
    assert seen["version"] == version
    # A pinned client never asks who the server is; the other two learn it on connect.
    if era != "modern":
        assert seen["server_info"].name == SERVER_NAME
        assert seen["server_info"].version == __version__
    check_session(seen["tools"], seen["results"])
    check_wire(sandbox, era)
