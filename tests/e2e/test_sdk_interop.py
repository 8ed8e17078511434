"""The official Python SDK's legacy `ClientSession`, and every response against the schemas.

1. `ClientSession` over `stdio_client` (`mcp` 2.x) is the SDK's low-level, handshake-era
   path: it opens with `initialize` and never probes `server/discover` (only the high-level
   `Client` in auto mode does; `tests/e2e/test_clients_python.py` drives that). It lists the
   tools and calls `system_metrics`; `ClientSession.call_tool` always re-validates a non-error
   result's `structuredContent` against the tool's `outputSchema` (there is no switch to turn
   it on in 2.x; `validate_tool_result` runs inside `call_tool`), and a negative control shows
   that validation is live against our schema. The exchange is recorded on the wire
   (`tests.support.wiretap`) and every response checked against its revision's schema. A
   client that probes by hand and then runs the handshake on the same connection is served
   too: the probe leaves the era open.

2. Every response of a session in each of the four handshake revisions, driven by hand
   through every kind of response, is validated with the SDK's own protocol types and against
   the official JSON Schema of that very revision, plus a closed-world check of every member
   (`tests.support.wire_schema` says why each of the three is needed).
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import anyio

# jsonschema ships no type information, and its stubs are not a dependency of the project.
import jsonschema  # type: ignore[import-untyped]
import mcp_types
import pydantic
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import jsonrpc as sdk_jsonrpc

from mcp_server_suite import SERVER_NAME, __version__
from mcp_server_suite.core.framing import MAX_FRAME_BYTES
from tests.support.harness import (
    HANDSHAKE_VERSIONS,
    REPO_ROOT,
    ServerProcess,
    base_environment,
    initialize_params,
)
from tests.support.wire_schema import (
    MODERN_VERSION,
    REVISIONS,
    SCHEMA_DIR,
    definitions,
    validate_official,
    validate_response,
    validate_transcript,
)
from tests.support.wiretap import (
    Sender,
    Transcript,
    WireLine,
    read_transcripts,
    wiretap_command,
)

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

SERVER_ENV = {"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}
# What the schema checks raise for a message that breaks a revision's schema or the SDK's types.
INVALID = (jsonschema.ValidationError, pydantic.ValidationError)
SERVER_COMMAND = [sys.executable, "-X", "dev", "-m", "mcp_server_suite"]


def assert_clean(stderr: str) -> None:
    for marker in ("Traceback", "ResourceWarning", "Exception ignored"):
        assert marker not in stderr, stderr


# --------------------------------------------------------------------------------------------
# The SDK's ClientSession
# --------------------------------------------------------------------------------------------


async def _client_session_flow(parameters: StdioServerParameters, errlog: Any) -> None:
    async with (
        stdio_client(parameters, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert init.protocol_version == "2025-11-25"
        assert init.server_info.name == SERVER_NAME
        assert init.server_info.version == __version__
        assert init.capabilities.tools is not None
        assert session.protocol_version == "2025-11-25"

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


def test_sdk_client_session_opens_with_initialize_and_validates_results(tmp_path: Any) -> None:
    wire = tmp_path / "wire"
    command = wiretap_command(wire, SERVER_COMMAND)
    parameters = StdioServerParameters(
        command=command[0], args=command[1:], env=base_environment(SERVER_ENV), cwd=REPO_ROOT
    )
    with tempfile.TemporaryFile("w+") as errlog:
        anyio.run(_client_session_flow, parameters, errlog)
        errlog.seek(0)
        assert_clean(errlog.read())
    (transcript,) = read_transcripts(wire)
    assert transcript.status == 0, transcript.stderr
    requests = [message for message in transcript.sent_by("client") if "id" in message]
    # ClientSession never probes: the handshake is the first thing on the wire.
    assert requests[0]["method"] == "initialize"
    assert "server/discover" not in {request["method"] for request in requests}
    checked = validate_transcript(transcript)
    assert {version for version, _ in checked} == {"2025-11-25"}
    assert {method for _, method in checked} == {"initialize", "ping", "tools/list", "tools/call"}


async def _probe_then_handshake_flow(parameters: StdioServerParameters, errlog: Any) -> None:
    async with (
        stdio_client(parameters, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        # A dual-era client that probes and then decides on the handshake anyway (the SDK's
        # auto mode does when the server offers no modern version it knows).
        probe = await session.send_discover(MODERN_VERSION)
        assert MODERN_VERSION in probe["supportedVersions"]
        init = await session.initialize()
        assert init.protocol_version == "2025-11-25"
        # The session is legacy now: a later probe is refused at once, never left to time out.
        with pytest.raises(MCPError) as again:
            await session.send_discover(MODERN_VERSION)
        assert again.value.code == sdk_jsonrpc.INVALID_REQUEST
        listing = await session.list_tools()
        assert [tool.name for tool in listing.tools] == ["system_metrics"]


def test_a_probe_leaves_the_era_open_for_the_handshake(tmp_path: Any) -> None:
    wire = tmp_path / "wire"
    command = wiretap_command(wire, SERVER_COMMAND)
    parameters = StdioServerParameters(
        command=command[0], args=command[1:], env=base_environment(SERVER_ENV), cwd=REPO_ROOT
    )
    with tempfile.TemporaryFile("w+") as errlog:
        anyio.run(_probe_then_handshake_flow, parameters, errlog)
        errlog.seek(0)
        assert_clean(errlog.read())
    (transcript,) = read_transcripts(wire)
    assert transcript.status == 0, transcript.stderr
    checked = validate_transcript(transcript)
    assert checked[0] == (MODERN_VERSION, "server/discover")
    assert checked[1] == ("2025-11-25", "initialize")


# --------------------------------------------------------------------------------------------
# Every response of a session, in each handshake revision, against the official schemas
# --------------------------------------------------------------------------------------------


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


def test_the_schema_checks_catch_a_member_of_another_revision() -> None:
    # A 2025-06-18 tool title in a 2024-11-05 listing passes the open official schema, but
    # not the closed-world check; a wrong type fails the schema itself.
    tool = {"name": "t", "title": "T", "inputSchema": {"type": "object"}}
    listing = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [tool]}}
    validate_official("2024-11-05", "ListToolsResult", listing["result"])
    with pytest.raises(AssertionError):
        validate_response("2024-11-05", "tools/list", listing)
    with pytest.raises(jsonschema.ValidationError):
        validate_official("2024-11-05", "CallToolResult", {"content": "text"})
    # A 2026-07-28 listing needs its resultType and caching hints, and carries nothing else.
    modern = {"resultType": "complete", "tools": [], "ttlMs": 0, "cacheScope": "public"}
    validate_response(MODERN_VERSION, "tools/list", {"jsonrpc": "2.0", "id": 2, "result": modern})
    for broken in (
        {key: value for key, value in modern.items() if key != "resultType"},
        {**modern, "cacheScope": "shared"},
    ):
        with pytest.raises(INVALID):
            validate_response(
                MODERN_VERSION, "tools/list", {"jsonrpc": "2.0", "id": 3, "result": broken}
            )
    leaked = {**modern, "protocolVersion": "2025-11-25"}
    with pytest.raises(AssertionError):
        validate_response(
            MODERN_VERSION, "tools/list", {"jsonrpc": "2.0", "id": 4, "result": leaked}
        )


def _wire(*lines: tuple[Sender, dict[str, Any]]) -> Transcript:
    return Transcript(
        SCHEMA_DIR, tuple(WireLine(sender, json.dumps(message)) for sender, message in lines)
    )


def test_the_transcript_check_pairs_each_response_with_its_request() -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION}
    listing = {"resultType": "complete", "tools": [], "ttlMs": 0, "cacheScope": "public"}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    answer = {"jsonrpc": "2.0", "id": 1, "result": listing}
    assert validate_transcript(_wire(("client", request), ("server", answer))) == [
        (MODERN_VERSION, "tools/list")
    ]
    with pytest.raises(AssertionError, match="a response to no request"):
        validate_transcript(_wire(("server", answer)))
    with pytest.raises(AssertionError, match="left unanswered"):
        validate_transcript(_wire(("client", request)))
    # A legacy result answering a modern request fails, whatever the SDK would accept.
    with pytest.raises(INVALID):
        validate_transcript(
            _wire(("client", request), ("server", {**answer, "result": {"tools": []}}))
        )


def test_schema_copies_are_the_five_revisions() -> None:
    assert sorted(path.stem for path in SCHEMA_DIR.glob("*.json")) == sorted(REVISIONS)
    for version in HANDSHAKE_VERSIONS:
        assert {"InitializeResult", "CallToolResult", "Tool"} <= set(definitions(version))
    assert {"DiscoverResult", "CallToolResult", "Tool"} <= set(definitions(MODERN_VERSION))
