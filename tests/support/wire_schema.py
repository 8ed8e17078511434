"""Server messages checked against the official MCP schema of their revision.

Each response is validated twice: with the MCP SDK's own protocol types
(`mcp_types.jsonrpc` for the envelope, `mcp_types.methods.parse_server_result` for the
result), and against the official JSON Schema of that very revision (verbatim copies in
`tests/vectors/mcp-schema/`) with `jsonschema`. The schemas leave objects open, so a member of
another revision (a 2025-06-18 `title` in a 2024-11-05 tool, a legacy `protocolVersion` in a
2026-07-28 result) would pass them; a closed-world check therefore also requires every member
of the objects the server builds to be one that revision defines. The SDK checks every
revision before 2025-11-25 against the 2025-11-25 models, which ignore unknown members: the
official schema and the closed-world check are what hold the older revisions.

`validate_transcript` applies this to a whole recorded exchange (`tests.support.wiretap`):
each response is checked in the revision its request was made in, which for a modern request
is the version its `_meta` names and for a legacy one the version `initialize` negotiated.

Known divergence: an error whose request id could not be read (a parse error) carries
`"id": null`, as JSON-RPC 2.0 requires and the SDK's own `JSONRPCError` accepts. No MCP schema
admits `null` there (2025-11-25 and later let the member be omitted instead), so for those
errors the envelope is checked without its `id`, and the `error` member in full.

`mcp` and `jsonschema` are imported inside the functions, so modules that use this can still
be collected where the SDK is not installed (the Nix build deselects the interop tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from tests.support.harness import HANDSHAKE_VERSIONS, REPO_ROOT
from tests.support.wiretap import Transcript

__all__ = [
    "MODERN_VERSION",
    "PROTOCOL_VERSION_META",
    "REVISIONS",
    "SCHEMA_DIR",
    "assert_closed",
    "definitions",
    "official_schema",
    "request_version",
    "validate_official",
    "validate_response",
    "validate_structured_content",
    "validate_transcript",
]

SCHEMA_DIR = REPO_ROOT / "tests" / "vectors" / "mcp-schema"
MODERN_VERSION = "2026-07-28"
REVISIONS = (MODERN_VERSION, *HANDSHAKE_VERSIONS)
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

# The result each method's response carries, by revision era.
LEGACY_RESULTS = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
}
MODERN_RESULTS = {
    "server/discover": "DiscoverResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "subscriptions/listen": "SubscriptionsListenResult",
}
# A request the server answers only when the client ends it: a `subscriptions/listen` stream
# stays open for the life of the connection, so a recorded exchange may end with it pending.
LONG_LIVED = frozenset({"subscriptions/listen"})
# The 2026-07-28 error whose shape the schema pins beyond the generic `Error`.
UNSUPPORTED_PROTOCOL_VERSION = -32022


@cache
def official_schema(version: str) -> dict[str, Any]:
    """The official JSON Schema of `version`, as copied into the tests."""
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{version}.json").read_text("utf-8"))
    return schema


def definitions(version: str) -> dict[str, Any]:
    """The named definitions of `version`'s schema."""
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
def _validator(version: str, name: str) -> Any:
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    schema = official_schema(version)
    defs_key = "$defs" if "$defs" in schema else "definitions"
    target = {**schema, "$ref": f"#/{defs_key}/{name}"}
    cls = validator_for(schema)
    cls.check_schema(target)
    return cls(target)


def validate_official(version: str, name: str, instance: Any) -> None:
    """Validate `instance` against definition `name` of `version`'s schema.

    Raises:
        jsonschema.ValidationError: It does not conform.
    """
    _validator(version, name).validate(instance)


def validate_structured_content(output_schema: Mapping[str, Any], content: Any) -> None:
    """Validate a tool result's `structuredContent` against the tool's `outputSchema`.

    Raises:
        jsonschema.ValidationError: It does not conform.
    """
    from jsonschema.validators import validator_for

    cls = validator_for(output_schema)
    cls.check_schema(output_schema)
    cls(output_schema).validate(content)


def assert_closed(version: str, name: str, instance: Mapping[str, Any]) -> None:
    """Every member is one the revision's definition of `name` declares."""
    declared = set(definitions(version)[name].get("properties", {}))
    assert set(instance) <= declared, (version, name, set(instance) - declared)


def _check_tools(version: str, tools: Iterable[Mapping[str, Any]]) -> None:
    for tool in tools:
        assert_closed(version, "Tool", tool)
        if "annotations" in tool:
            assert_closed(version, "ToolAnnotations", tool["annotations"])


def _check_result_meta(version: str, result: Mapping[str, Any]) -> None:
    if "_meta" not in result:
        return
    meta = result["_meta"]
    if SERVER_INFO_META in meta:
        assert_closed(version, "Implementation", meta[SERVER_INFO_META])


def check_result_members(version: str, method: str, result: Mapping[str, Any]) -> None:
    """The closed-world check of the objects the server builds for `method`."""
    if version == MODERN_VERSION:
        _check_result_meta(version, result)
    if method == "initialize":
        assert_closed(version, "InitializeResult", result)
        assert_closed(version, "Implementation", result["serverInfo"])
        assert_closed(version, "ServerCapabilities", result["capabilities"])
    elif method == "server/discover":
        assert_closed(version, "DiscoverResult", result)
        assert_closed(version, "ServerCapabilities", result["capabilities"])
    elif method == "tools/list":
        assert_closed(version, "ListToolsResult", result)
        _check_tools(version, result["tools"])
    elif method == "tools/call":
        assert_closed(version, "CallToolResult", result)
        for block in result["content"]:
            assert_closed(version, "TextContent", block)
    elif method == "ping":
        assert result == {}


def _sdk_result_types() -> dict[str, type[Any]]:
    import mcp_types

    return {
        "initialize": mcp_types.InitializeResult,
        "ping": mcp_types.EmptyResult,
        "server/discover": mcp_types.DiscoverResult,
        "tools/list": mcp_types.ListToolsResult,
        "tools/call": mcp_types.CallToolResult,
    }


def _validate_error(version: str, message: Mapping[str, Any]) -> None:
    import jsonschema  # type: ignore[import-untyped]

    envelope = definition_name(version, "JSONRPCErrorResponse", "JSONRPCError")
    if message["id"] is None:
        # JSON-RPC 2.0 demands null here; the MCP schemas cannot say null (module docstring).
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
        if version == MODERN_VERSION and message["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION:
            validate_official(version, "UnsupportedProtocolVersionError", message)
    assert_closed(version, envelope, message)
    error_schema = definitions(version)[envelope]["properties"]["error"]
    if "$ref" in error_schema:
        error_schema = definitions(version)[error_schema["$ref"].rsplit("/", 1)[1]]
    declared = set(error_schema.get("properties", {}))
    assert set(message["error"]) <= declared, (version, set(message["error"]) - declared)


def validate_response(version: str, method: str | None, message: Mapping[str, Any]) -> None:
    """One response, against the SDK's types and the revision's official schema.

    Args:
        version: The protocol revision the request was made in.
        method: The request's method (`None` when the request could not be read).
        message: The whole response.

    Raises:
        AssertionError, jsonschema.ValidationError, pydantic.ValidationError: It does not
            conform, or carries a member the revision does not define.
    """
    from mcp_types import jsonrpc as sdk_jsonrpc
    from mcp_types import methods as sdk_methods

    parsed = sdk_jsonrpc.jsonrpc_message_adapter.validate_python(message)
    if "result" not in message:
        assert isinstance(parsed, sdk_jsonrpc.JSONRPCError), message
        _validate_error(version, message)
        return
    assert method is not None, message
    assert isinstance(parsed, sdk_jsonrpc.JSONRPCResponse), message
    results = MODERN_RESULTS if version == MODERN_VERSION else LEGACY_RESULTS
    assert method in results, (version, method)
    if method in _sdk_result_types():
        typed = sdk_methods.parse_server_result(method, version, message["result"])
        assert isinstance(typed, _sdk_result_types()[method]), (method, typed)
    envelope = definition_name(version, "JSONRPCResultResponse", "JSONRPCResponse")
    validate_official(version, envelope, message)
    assert_closed(version, envelope, message)
    validate_official(version, results[method], message["result"])
    check_result_members(version, method, message["result"])


def request_version(request: Mapping[str, Any], negotiated: str | None) -> str | None:
    """The revision a client request is made in: its `_meta` version, else the session's."""
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get(PROTOCOL_VERSION_META), str):
        version: str = meta[PROTOCOL_VERSION_META]
        return version
    if request.get("method") == "initialize" and isinstance(params, dict):
        requested = params.get("protocolVersion")
        return requested if isinstance(requested, str) else negotiated
    return negotiated


def _notification_definition(version: str, method: str) -> str:
    for name, definition in definitions(version).items():
        constant = definition.get("properties", {}).get("method", {}).get("const")
        if constant == method and name.endswith("Notification"):
            return name
    raise AssertionError(f"{method!r} is not a notification of {version}")


def validate_transcript(transcript: Transcript) -> list[tuple[str, str | None]]:
    """Validate every message the server wrote in one recorded exchange.

    Returns:
        (revision, method) of each response checked, in order, so a test can assert which
        revisions and methods the exchange covered.

    Raises:
        AssertionError: A response answers no request, or fails a check of `validate_response`.
        jsonschema.ValidationError, pydantic.ValidationError: See `validate_response`.
    """
    pending: dict[Any, tuple[str, str]] = {}
    negotiated: str | None = None
    checked: list[tuple[str, str | None]] = []
    for line in transcript.lines:
        message = line.message
        if line.sender == "client":
            if "id" in message and "method" in message:
                version = request_version(message, negotiated)
                assert version is not None, f"no revision for {message}"
                pending[message["id"]] = (version, message["method"])
            continue
        if "method" in message:
            assert "id" not in message, f"the server sent a request: {message}"
            version = negotiated or MODERN_VERSION
            validate_official(
                version, _notification_definition(version, message["method"]), message
            )
            continue
        assert message["id"] in pending, f"a response to no request: {message}"
        version, method = pending.pop(message["id"])
        validate_response(version, method, message)
        checked.append((version, method))
        if method == "initialize" and "result" in message:
            negotiated = message["result"]["protocolVersion"]
    unanswered = {key: value for key, value in pending.items() if value[1] not in LONG_LIVED}
    assert not unanswered, f"requests left unanswered: {unanswered}"
    return checked
