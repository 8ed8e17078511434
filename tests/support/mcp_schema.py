"""The official MCP 2026-07-28 schema, as a check every response of a 2026 session must pass.

`check_modern_message` validates one message the server wrote in a 2026-07-28 session: the
envelope against the schema's definition for what it answers (`DiscoverResultResponse`,
`ListToolsResultResponse`, `CallToolResultResponse`, `SubscriptionsListenResultResponse`,
`JSONRPCErrorResponse`, `UnsupportedProtocolVersionError`, or the acknowledgement
notification), and, because the schema leaves objects open, a closed-world check that every
member of the objects the server builds is one the schema declares.

The schema is a verbatim copy (`tests/vectors/mcp-schema/2026-07-28.json`, provenance in
`tests/vectors/README.md`). An error whose request id could not be read carries `"id":
null`, as JSON-RPC 2.0 requires; the schema cannot say null, so such an error is checked
without its `id` (the schema lets the member be omitted).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

# jsonschema ships no type information, and its stubs are not a dependency of the project.
import jsonschema  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

from tests.support.harness import REPO_ROOT

__all__ = ["MODERN_RESPONSES", "assert_invalid", "check_modern_message", "definitions", "validate"]

SCHEMA_FILE = REPO_ROOT / "tests" / "vectors" / "mcp-schema" / "2026-07-28.json"

# The response definition of each method a 2026 session answers with a result.
MODERN_RESPONSES = {
    "server/discover": "DiscoverResultResponse",
    "tools/list": "ListToolsResultResponse",
    "tools/call": "CallToolResultResponse",
    "subscriptions/listen": "SubscriptionsListenResultResponse",
}

# The result definition, for the closed-world check of its members.
_RESULTS = {
    "server/discover": "DiscoverResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "subscriptions/listen": "SubscriptionsListenResult",
}


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text("utf-8"))
    return schema


def definitions() -> dict[str, Any]:
    """The schema's `$defs`."""
    defs: dict[str, Any] = _schema()["$defs"]
    return defs


@cache
def _validator(name: str) -> Any:
    target = {**_schema(), "$ref": f"#/$defs/{name}"}
    cls = validator_for(target)
    cls.check_schema(target)
    return cls(target)


def validate(name: str, instance: Any) -> None:
    """Validate `instance` against the definition `name`.

    Raises:
        jsonschema.ValidationError: It does not conform.
    """
    _validator(name).validate(instance)


def _closed(name: str, instance: dict[str, Any]) -> None:
    declared = set(definitions()[name].get("properties", {}))
    extra = set(instance) - declared
    assert not extra, (name, extra)


def check_modern_message(method: str | None, message: dict[str, Any]) -> None:
    """Check one message of a 2026-07-28 session against the official schema.

    Args:
        method: The method of the request it answers (None for a parse error, whose request
            could not be read).
        message: The message as decoded from the wire.

    Raises:
        AssertionError: A member the schema does not declare.
        jsonschema.ValidationError: The message does not conform.
    """
    if "method" in message:
        # The only notification the server sends: a subscription's acknowledgement.
        validate("SubscriptionsAcknowledgedNotification", message)
        _closed("SubscriptionsAcknowledgedNotification", message)
        _closed("SubscriptionsAcknowledgedNotificationParams", message["params"])
        return
    if "result" in message:
        assert method is not None, message
        validate(MODERN_RESPONSES[method], message)
        result = message["result"]
        _closed(_RESULTS[method], result)
        assert result["resultType"] == "complete", result
        meta = result["_meta"]
        validate("Implementation", meta["io.modelcontextprotocol/serverInfo"])
        _closed("Implementation", meta["io.modelcontextprotocol/serverInfo"])
        if method == "tools/list":
            for tool in result["tools"]:
                _closed("Tool", tool)
                _closed("ToolAnnotations", tool["annotations"])
        if method == "tools/call":
            for block in result["content"]:
                _closed("TextContent", block)
        return
    _closed("JSONRPCErrorResponse", message)
    _closed("Error", message["error"])
    if message["id"] is None:
        without_id = {key: value for key, value in message.items() if key != "id"}
        validate("JSONRPCErrorResponse", without_id)
    else:
        validate("JSONRPCErrorResponse", message)
    if message["error"]["code"] == -32022:
        validate("UnsupportedProtocolVersionError", message)
    if message["error"]["code"] == -32602:
        validate("InvalidParamsError", message["error"])
    if message["error"]["code"] == -32601:
        validate("MethodNotFoundError", message["error"])


def assert_invalid(name: str, instance: Any) -> None:
    """The definition refuses `instance` (a negative control for the checks above)."""
    try:
        validate(name, instance)
    except jsonschema.ValidationError:
        return
    raise AssertionError(f"{name} accepted {instance!r}")
