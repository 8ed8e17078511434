"""Real clients against the real server: the official Python SDK, and the MCP Inspector CLI.

1. The SDK's own client (`mcp` 2.x: `ClientSession` over `stdio_client`, and the high-level
   `Client`) connects the way a 2.x client does: it probes `server/discover` first and falls
   back to `initialize` on any error other than an incompatible modern version. It lists the
   tools and calls `system_metrics`; `ClientSession.call_tool` always re-validates a
   non-error result's `structuredContent` against the tool's `outputSchema` (there is no
   switch to turn it on in 2.x; `validate_tool_result` runs inside `call_tool`), and a
   negative control shows that validation is live against our schema.

2. Every response of a session in each of the four protocol versions is validated twice:
   - with the SDK's own protocol types: `mcp_types.jsonrpc` for the envelope and
     `mcp_types.methods.parse_server_result(method, version, result)` for the result. That
     is the SDK's per-version facility, but it gates methods per version and checks shapes
     per schema era: every pre-2026 version is checked against the 2025-11-25 wire models,
     which ignore unknown members. So, in addition,
   - against the official JSON Schema of that very revision (`tests/vectors/mcp-schema/`,
     verbatim copies), with `jsonschema`, plus a closed-world check that every member of
     the objects the server builds is one that revision's schema defines (the schemas leave
     objects open, so a 2025-06-18 `title` in a 2024-11-05 tool would pass them).

   Known divergence: an error whose request id could not be read (a parse error) carries
   `"id": null`, as JSON-RPC 2.0 requires and the SDK's own `JSONRPCError` accepts. No MCP
   schema admits `null` there (2025-11-25 lets the member be omitted instead), so for those
   errors the envelope is checked without its `id`, and the `error` member in full.

3. The MCP Inspector CLI (`@modelcontextprotocol/inspector` 0.15, on the TypeScript SDK) is
   a second, independent client. It is installed into `.cache/inspector` by the CI install
   step; when it is missing the test fails and says how to install it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from functools import cache
from typing import Any

import anyio

# jsonschema ships no type information, and its stubs are not a dependency of the project.
import jsonschema  # type: ignore[import-untyped]
import mcp_types
import pytest
from jsonschema.validators import validator_for  # type: ignore[import-untyped]
from mcp import ClientSession, StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import jsonrpc as sdk_jsonrpc
from mcp_types import methods as sdk_methods

from mcp_server_suite import SERVER_NAME, __version__
from mcp_server_suite.core.framing import MAX_FRAME_BYTES
from tests.support.harness import (
    HANDSHAKE_VERSIONS,
    REPO_ROOT,
    ServerProcess,
    base_environment,
    initialize_params,
)

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

SCHEMA_DIR = REPO_ROOT / "tests" / "vectors" / "mcp-schema"
SERVER_ENV = {"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}

INSPECTOR_DIR = REPO_ROOT / ".cache" / "inspector"
INSPECTOR_CLI = (
    INSPECTOR_DIR
    / "node_modules"
    / "@modelcontextprotocol"
    / "inspector"
    / "cli"
    / "build"
    / "cli.js"
)
INSPECTOR_INSTALL = (
    "npm install --prefix .cache/inspector --no-audit --no-fund "
    "@modelcontextprotocol/inspector@0.15.0"
)

# The SDK's probe waits up to 10 s for `server/discover` before it gives up and falls back.
# A connect far below that proves the probe was answered, not timed out.
CONNECT_LIMIT_S = 3.0


def server_parameters() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-X", "dev", "-m", "mcp_server_suite"],
        env=base_environment(SERVER_ENV),
        cwd=REPO_ROOT,
    )


def assert_clean(stderr: str) -> None:
    for marker in ("Traceback", "ResourceWarning", "Exception ignored"):
        assert marker not in stderr, stderr


# --------------------------------------------------------------------------------------------
# The SDK's client
# --------------------------------------------------------------------------------------------


async def _client_session_flow(errlog: Any) -> dict[str, float]:
    timings: dict[str, float] = {}
    started = time.monotonic()
    async with (
        stdio_client(server_parameters(), errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        # A probe is answered and leaves the era open, so the handshake still works after it.
        probe = await session.send_discover("2026-07-28")
        assert probe["supportedVersions"][0] == "2026-07-28"
        init = await session.initialize()
        timings["connect"] = time.monotonic() - started
        assert init.protocol_version == "2025-11-25"
        assert init.server_info.name == SERVER_NAME
        assert init.server_info.version == __version__
        assert init.capabilities.tools is not None
        assert session.protocol_version == "2025-11-25"

        # A probe on a warm server is one round trip; the session is legacy now.
        probe_started = time.monotonic()
        with pytest.raises(MCPError) as again:
            await session.send_discover("2026-07-28")
        timings["probe"] = time.monotonic() - probe_started
        assert again.value.code == sdk_jsonrpc.INVALID_REQUEST

        await session.send_ping()
        listing = await session.list_tools()
        (tool,) = listing.tools
        assert tool.name == "system_metrics"
        assert tool.output_schema is not None
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True

        # call_tool re-validates structuredContent against the listed outputSchema.
        for arguments in ({}, {"include_disk": True}):
            result = await session.call_tool("system_metrics", arguments)
            assert result.is_error is False
            assert result.structured_content is not None
            assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
        assert result.structured_content["disk_percent_used"] is not None

        # The validation is live: a result that breaks the schema is refused by the SDK.
        broken = mcp_types.CallToolResult(
            content=[], structured_content={"cpu": {"utilization_percent": 500}}
        )
        with pytest.raises(RuntimeError, match="Invalid structured content"):
            await session.validate_tool_result("system_metrics", broken)

        # In-band refusal: an isError result the model can read, not an exception.
        refused = await session.call_tool("system_metrics", {"include_disk": "yes"})
        assert refused.is_error is True
        assert refused.structured_content is None
        problem = json.loads(refused.content[0].text)  # type: ignore[union-attr]
        assert problem["code"] == "MCP_VALIDATION_ERROR"

        # Unknown tool: a JSON-RPC error the SDK raises.
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("no_such_tool", {})
        assert unknown.value.code == sdk_jsonrpc.INVALID_PARAMS
    return timings


def test_sdk_client_session_over_stdio_client() -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        timings = anyio.run(_client_session_flow, errlog)
        errlog.seek(0)
        assert_clean(errlog.read())
    assert timings["connect"] < CONNECT_LIMIT_S, timings
    assert timings["probe"] < 1.0, timings


async def _high_level_client_flow(errlog: Any) -> float:
    started = time.monotonic()
    # mode="auto" (the default) is the probe-then-fallback policy of 2.x clients.
    async with Client(server_parameters(), mode="auto") as client:
        connected = time.monotonic() - started
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == SERVER_NAME
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["system_metrics"]
        result = await client.call_tool("system_metrics", {"include_disk": False})
        assert result.is_error is False
        assert result.structured_content is not None
        assert result.structured_content["disk_percent_used"] is None
    return connected


def test_sdk_high_level_client_connects_with_the_discover_probe() -> None:
    connected = anyio.run(_high_level_client_flow, sys.stderr)
    assert connected < CONNECT_LIMIT_S


# --------------------------------------------------------------------------------------------
# Every response of a session, in each protocol version, against the official schemas
# --------------------------------------------------------------------------------------------


@cache
def official_schema(version: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{version}.json").read_text("utf-8"))
    return schema


def definitions(version: str) -> dict[str, Any]:
    schema = official_schema(version)
    defs: dict[str, Any] = schema.get("$defs") or schema["definitions"]
    return defs


def definition_name(version: str, *candidates: str) -> str:
    """The first of `candidates` the revision defines (names changed in 2025-11-25)."""
    defs = definitions(version)
    for name in candidates:
        if name in defs:
            return name
    raise KeyError(candidates)


@cache
def validator(version: str, name: str) -> jsonschema.protocols.Validator:
    schema = official_schema(version)
    defs_key = "$defs" if "$defs" in schema else "definitions"
    target = {**schema, "$ref": f"#/{defs_key}/{name}"}
    cls = validator_for(schema)
    cls.check_schema(target)
    return cls(target)


def validate_official(version: str, name: str, instance: Any) -> None:
    validator(version, name).validate(instance)


def assert_closed(version: str, name: str, instance: dict[str, Any]) -> None:
    """Every member is one the revision's definition of `name` declares."""
    declared = set(definitions(version)[name].get("properties", {}))
    assert set(instance) <= declared, (version, name, set(instance) - declared)


def check_result_members(version: str, method: str, result: dict[str, Any]) -> None:
    if method == "initialize":
        assert_closed(version, "InitializeResult", result)
        assert_closed(version, "Implementation", result["serverInfo"])
        assert_closed(version, "ServerCapabilities", result["capabilities"])
    elif method == "tools/list":
        assert_closed(version, "ListToolsResult", result)
        for tool in result["tools"]:
            assert_closed(version, "Tool", tool)
            if "annotations" in tool:
                assert_closed(version, "ToolAnnotations", tool["annotations"])
    elif method == "tools/call":
        assert_closed(version, "CallToolResult", result)
        for block in result["content"]:
            assert_closed(version, "TextContent", block)
    elif method == "ping":
        assert result == {}


RESULT_DEFINITIONS = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
}

SDK_RESULT_TYPES: dict[str, type[Any]] = {
    "initialize": mcp_types.InitializeResult,
    "ping": mcp_types.EmptyResult,
    "tools/list": mcp_types.ListToolsResult,
    "tools/call": mcp_types.CallToolResult,
}


def validate_response(version: str, method: str | None, message: dict[str, Any]) -> None:
    """One response, against the SDK's types and the revision's official schema."""
    parsed = sdk_jsonrpc.jsonrpc_message_adapter.validate_python(message)
    if "result" in message:
        assert method is not None
        assert isinstance(parsed, sdk_jsonrpc.JSONRPCResponse)
        typed = sdk_methods.parse_server_result(method, version, message["result"])
        assert isinstance(typed, SDK_RESULT_TYPES[method]), (method, typed)
        envelope = definition_name(version, "JSONRPCResultResponse", "JSONRPCResponse")
        validate_official(version, envelope, message)
        validate_official(version, RESULT_DEFINITIONS[method], message["result"])
        check_result_members(version, method, message["result"])
        return
    assert isinstance(parsed, sdk_jsonrpc.JSONRPCError)
    envelope = definition_name(version, "JSONRPCErrorResponse", "JSONRPCError")
    if message["id"] is None:
        # JSON-RPC 2.0 demands null here; the MCP schemas cannot say null (see above).
        without_id = {key: value for key, value in message.items() if key != "id"}
        if "id" not in definitions(version)[envelope].get("required", []):
            validate_official(version, envelope, without_id)
        error_schema = definitions(version)[envelope]["properties"]["error"]
        if "$ref" in error_schema:
            validate_official(version, error_schema["$ref"].rsplit("/", 1)[1], message["error"])
        else:
            jsonschema.validate(message["error"], error_schema)
    else:
        validate_official(version, envelope, message)
    assert_closed(version, envelope, message)


def session_transcript(version: str) -> list[tuple[str | None, dict[str, Any]]]:
    """Drive one session through every kind of response; return (method, response) pairs."""
    server = ServerProcess(SERVER_ENV)
    transcript: list[tuple[str | None, dict[str, Any]]] = []
    try:

        def exchange(method: str | None, message: dict[str, Any] | bytes) -> dict[str, Any]:
            if isinstance(message, bytes):
                server.send_raw(message + b"\n")
            else:
                server.send(message)
            response = server.recv()
            transcript.append((method, response))
            return response

        def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> Any:
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                message["params"] = params
            return exchange(method, message)

        request(1, "ping")  # before initialize
        assert "error" in request(2, "tools/list")  # refused before initialize
        assert "result" in request(3, "initialize", initialize_params(version))
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        request(4, "ping")
        request(5, "tools/list")
        success = request(6, "tools/call", {"name": "system_metrics", "arguments": {}})
        assert success["result"]["isError"] is False
        disk = {"name": "system_metrics", "arguments": {"include_disk": True}}
        assert request(7, "tools/call", disk)["result"]["isError"] is False
        refused = {"name": "system_metrics", "arguments": {"include_disk": "yes"}}
        assert request(8, "tools/call", refused)["result"]["isError"] is True
        assert "error" in request(9, "tools/call", {"name": "nope", "arguments": {}})
        assert "error" in request(10, "no/such/method")
        assert "error" in request(11, "initialize", initialize_params(version))
        assert "error" in request(12, "tools/list", {"cursor": "x"})
        assert "error" in exchange(None, b"{not json")
        assert "error" in exchange(None, b'{"jsonrpc":"2.0","id":13,"method":"ping","x":1}')
        assert "error" in exchange(None, b"x" * (MAX_FRAME_BYTES + 1))
        server.close_stdin()
        assert server.wait() == 0
        assert_clean(server.stderr)
    finally:
        server.kill()
    return transcript


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
def test_every_response_validates_against_the_sdk_types_and_the_official_schema(
    version: str,
) -> None:
    transcript = session_transcript(version)
    kinds = {("result" if "result" in message else "error") for _, message in transcript}
    assert kinds == {"result", "error"}
    for method, message in transcript:
        validate_response(version, method, message)


def test_the_schema_checks_catch_a_member_of_a_later_revision() -> None:
    # A 2025-06-18 tool title in a 2024-11-05 listing passes the open official schema, but
    # not the closed-world check; a wrong type fails the schema itself.
    tool = {"name": "t", "title": "T", "inputSchema": {"type": "object"}}
    listing = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [tool]}}
    validate_official("2024-11-05", "ListToolsResult", listing["result"])
    with pytest.raises(AssertionError):
        validate_response("2024-11-05", "tools/list", listing)
    with pytest.raises(jsonschema.ValidationError):
        validate_official("2024-11-05", "CallToolResult", {"content": "text"})


def test_schema_copies_are_the_four_handshake_revisions() -> None:
    copies = sorted(path.stem for path in SCHEMA_DIR.glob("*.json"))
    assert copies == sorted((*HANDSHAKE_VERSIONS, "2026-07-28"))
    for version in HANDSHAKE_VERSIONS:
        defs = definitions(version)
        assert {"InitializeResult", "CallToolResult", "Tool"} <= set(defs)


# --------------------------------------------------------------------------------------------
# The MCP Inspector CLI
# --------------------------------------------------------------------------------------------


def inspector_command() -> list[str]:
    """The inspector's CLI; a missing install fails the test (it never skips)."""
    node = shutil.which("node")
    if node is None or not INSPECTOR_CLI.is_file():
        pytest.fail(
            f"the MCP Inspector CLI is not installed; run `{INSPECTOR_INSTALL}` "
            "from the top of the repository (Node.js 20 or newer)",
            pytrace=False,
        )
    return [node, str(INSPECTOR_CLI), "--cli"]


def run_inspector(command: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    target = [sys.executable, "-X", "dev", "-m", "mcp_server_suite"]
    return subprocess.run(
        [*command, *target, *args],
        env=base_environment({**SERVER_ENV, "HOME": str(INSPECTOR_DIR)}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_mcp_inspector_cli_lists_and_calls_tools() -> None:
    inspector = inspector_command()
    listed = run_inspector(inspector, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    (tool,) = json.loads(listed.stdout)["tools"]
    assert tool["name"] == "system_metrics"
    assert tool["annotations"]["readOnlyHint"] is True

    called = run_inspector(
        inspector,
        "--method",
        "tools/call",
        "--tool-name",
        "system_metrics",
        "--tool-arg",
        "include_disk=true",
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert result["isError"] is False
    assert 0 <= result["structuredContent"]["disk_percent_used"] <= 100
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]

    unknown = run_inspector(inspector, "--method", "tools/call", "--tool-name", "no_such_tool")
    assert unknown.returncode != 0
    assert "-32602" in unknown.stdout + unknown.stderr
