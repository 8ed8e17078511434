"""The dispatcher in the legacy era: lifecycle, method table, per-revision shaping, calls.

The 2026-07-28 era, and how a session chooses its era, are tested in `test_modern.py`.
"""

import json
from typing import Any

import pytest
from pydantic import Field

from mcp_server_suite.core.framing import FrameTooLarge
from mcp_server_suite.core.registry import RegisteredTool, ToolDescription, ToolRegistry, ToolSpec
from mcp_server_suite.core.server import (
    MAX_CLIENT_INFO_CHARS,
    CancelCall,
    ClientInfo,
    Dispatcher,
    Send,
    SessionState,
    StartCall,
)
from mcp_server_suite.core.versions import (
    LATEST,
    REVISIONS,
    SUPPORTED_VERSIONS,
    Era,
    negotiate,
)
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem


class EchoParams(StrictModel):
    text: str = Field(max_length=10)


class EchoResult(StrictModel):
    text: str


async def echo(params: EchoParams) -> EchoResult:
    return EchoResult(text=params.text)


ECHO = ToolSpec(
    name="echo",
    title="Echo",
    description="Echo text.",
    params_model=EchoParams,
    result_model=EchoResult,
    run=echo,
)


LEGACY_VERSIONS = tuple(v for v in SUPPORTED_VERSIONS if REVISIONS[v].era is Era.LEGACY)


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def request(request_id: object, method: str, params: object = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return frame(message)


def init_params(version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }


def sent(action: object) -> dict[str, Any]:
    assert isinstance(action, Send), action
    return dict(action.message)


def error_of(action: object) -> tuple[object, int]:
    message = sent(action)
    return message["id"], message["error"]["code"]


@pytest.fixture
def dispatcher() -> Dispatcher:
    return Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="9.9.9")


@pytest.fixture
def ready(dispatcher: Dispatcher) -> Dispatcher:
    sent(dispatcher.handle_frame(request(0, "initialize", init_params())))
    return dispatcher


def test_ping_before_initialize(dispatcher: Dispatcher) -> None:
    assert sent(dispatcher.handle_frame(request(1, "ping"))) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {},
    }
    assert dispatcher.state is SessionState.AWAITING_INIT


@pytest.mark.parametrize("method", ["tools/list", "tools/call"])
def test_requests_before_initialize_are_refused(dispatcher: Dispatcher, method: str) -> None:
    assert error_of(dispatcher.handle_frame(request(5, method, {"name": "echo"}))) == (5, -32600)


@pytest.mark.parametrize(
    "method", ["server/discover", "resources/list", "", "prompts/get", "tools/execute"]
)
def test_unknown_methods_are_answered_at_once_in_any_state(
    dispatcher: Dispatcher, method: str
) -> None:
    # Before the era is chosen, a discovery without its _meta is a 2026-07-28 request that
    # lacks its required fields (test_modern.py); in a handshake session it does not exist.
    opening = -32602 if method == "server/discover" else -32601
    assert error_of(dispatcher.handle_frame(request("u", method))) == ("u", opening)
    dispatcher.handle_frame(request(0, "initialize", init_params()))
    assert error_of(dispatcher.handle_frame(request("v", method))) == ("v", -32601)


def test_the_legacy_versions_are_the_four_handshake_revisions() -> None:
    assert LEGACY_VERSIONS == ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_supported_versions_are_echoed(dispatcher: Dispatcher, version: str) -> None:
    result = sent(dispatcher.handle_frame(request(0, "initialize", init_params(version))))["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "mcp-server-suite"
    assert result["serverInfo"]["version"] == "9.9.9"
    assert ("title" in result["serverInfo"]) == (version >= "2025-06-18")
    assert ("description" in result["serverInfo"]) == (version == "2025-11-25")
    assert dispatcher.state is SessionState.READY


@pytest.mark.parametrize(
    "version", ["1999-01-01", "2026-07-28", "DRAFT-2026-v1", "", "x" * 65, "2025-11-25" * 1000]
)
def test_unsupported_versions_get_the_latest(dispatcher: Dispatcher, version: str) -> None:
    # Any string, however long, is answered with the negotiated version, never refused.
    result = sent(dispatcher.handle_frame(request(0, "initialize", init_params(version))))["result"]
    assert result["protocolVersion"] == LATEST.version == "2025-11-25"


def test_negotiate_never_offers_a_non_legacy_revision() -> None:
    assert negotiate("2024-11-05").version == "2024-11-05"
    assert negotiate("nonsense") is LATEST


def test_initialize_only_once(ready: Dispatcher) -> None:
    assert error_of(ready.handle_frame(request(1, "initialize", init_params()))) == (1, -32600)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {
            "protocolVersion": 20251125,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
        {"protocolVersion": "2025-11-25", "clientInfo": {"name": "t", "version": "1"}},
        {"protocolVersion": "2025-11-25", "capabilities": {}},
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}},
        {"protocolVersion": None, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        {"protocolVersion": "2025-11-25", "capabilities": [], "clientInfo": "t"},
        [1, 2],
    ],
)
def test_invalid_initialize_params(dispatcher: Dispatcher, params: object) -> None:
    message = sent(dispatcher.handle_frame(request(3, "initialize", params)))
    assert message["error"]["code"] == -32602
    assert message["error"]["data"]["code"] == "MCP_INVALID_PARAMS"
    assert message["error"]["data"]["title"] == "Invalid request parameters"
    # Still not initialized (array params are refused before the era is even chosen).
    assert dispatcher.revision is None
    assert dispatcher.state in {SessionState.AWAITING_INIT, SessionState.OPENING}


def test_initialize_tolerates_newer_client_members(dispatcher: Dispatcher) -> None:
    params = init_params() | {"_meta": {"x": 1}, "futureField": True}
    params["clientInfo"] |= {"title": "T", "icons": []}
    assert "result" in sent(dispatcher.handle_frame(request(0, "initialize", params)))


def tools_for(version: str) -> list[dict[str, Any]]:
    dispatcher = Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")
    dispatcher.handle_frame(request(0, "initialize", init_params(version)))
    tools: list[dict[str, Any]] = sent(dispatcher.handle_frame(request(1, "tools/list")))["result"][
        "tools"
    ]
    return tools


def test_tool_shape_2024_11_05() -> None:
    (tool,) = tools_for("2024-11-05")
    assert set(tool) == {"name", "description", "inputSchema"}


def test_tool_shape_2025_03_26() -> None:
    (tool,) = tools_for("2025-03-26")
    assert set(tool) == {"name", "description", "inputSchema", "annotations"}
    assert tool["annotations"] == {
        "title": "Echo",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_tool_shape_with_output_schema(version: str) -> None:
    (tool,) = tools_for(version)
    assert set(tool) == {
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
    }
    assert tool["inputSchema"]["type"] == "object"
    assert tool["inputSchema"]["additionalProperties"] is False
    assert tool["outputSchema"]["properties"] == {"text": {"title": "Text", "type": "string"}}


@pytest.mark.parametrize("cursor", ["abc", "", None, 5])
def test_tools_list_refuses_a_cursor_with_its_own_problem_type(
    ready: Dispatcher, cursor: object
) -> None:
    message = sent(ready.handle_frame(request(1, "tools/list", {"cursor": cursor})))
    assert message["error"]["code"] == -32602
    problem = message["error"]["data"]
    assert problem["invalid_params"] == ["cursor"]
    assert problem["code"] == "MCP_INVALID_CURSOR"
    assert problem["type"] == "urn:mcp-server-suite:problem:invalid-cursor"
    assert problem["title"] == "Invalid pagination cursor"


def test_tools_list_accepts_unknown_members(ready: Dispatcher) -> None:
    # ListToolsRequest's params are open in every revision's schema.
    params = {"surprise": 1, "x-vendor": {"a": [1]}}
    assert len(sent(ready.handle_frame(request(1, "tools/list", params)))["result"]["tools"]) == 1


def test_tools_list_refuses_a_meta_that_is_not_an_object(ready: Dispatcher) -> None:
    message = sent(ready.handle_frame(request(1, "tools/list", {"_meta": None})))
    assert message["error"]["data"]["invalid_params"] == ["_meta"]


def test_tools_list_accepts_meta(ready: Dispatcher) -> None:
    assert "result" in sent(
        ready.handle_frame(request(1, "tools/list", {"_meta": {"progressToken": 1}}))
    )


def test_array_params_are_invalid_for_mcp_methods(ready: Dispatcher) -> None:
    message = sent(ready.handle_frame(request(1, "ping", [1])))
    assert message["error"]["code"] == -32602


def test_tools_call_starts_a_call(ready: Dispatcher) -> None:
    action = ready.handle_frame(
        request(7, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    )
    assert isinstance(action, StartCall)
    assert (action.request_id, action.tool.spec(), action.arguments) == (7, ECHO, {"text": "hi"})
    assert ready.in_flight == {7}


def test_calls_carry_the_client_that_initialized(ready: Dispatcher) -> None:
    action = ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    assert isinstance(action, StartCall)
    assert action.client == ClientInfo("t", "1")
    assert ready.client == ClientInfo("t", "1")


def test_client_info_is_bounded(dispatcher: Dispatcher) -> None:
    long_name, long_version = "n" * 5000, "v" * 5000
    params = init_params() | {"clientInfo": {"name": long_name, "version": long_version}}
    sent(dispatcher.handle_frame(request(0, "initialize", params)))
    assert dispatcher.client == ClientInfo(
        long_name[:MAX_CLIENT_INFO_CHARS], long_version[:MAX_CLIENT_INFO_CHARS]
    )


def test_no_client_before_initialize(dispatcher: Dispatcher) -> None:
    assert dispatcher.client is None


def test_tools_call_without_arguments_means_empty_arguments(ready: Dispatcher) -> None:
    action = ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    assert isinstance(action, StartCall)
    assert action.arguments == {}


def test_unknown_tool_is_invalid_params_with_a_problem(ready: Dispatcher) -> None:
    message = sent(ready.handle_frame(request(4, "tools/call", {"name": "no_such_tool"})))
    assert message["error"] == {
        "code": -32602,
        "message": "Unknown tool: 'no_such_tool'",
        "data": {
            "type": "urn:mcp-server-suite:problem:invalid-params",
            "title": "Invalid request parameters",
            "status": 400,
            "detail": "Unknown tool: 'no_such_tool'",
            "code": "MCP_INVALID_PARAMS",
            "invalid_params": ["name"],
            "metadata": {},
        },
    }
    assert ready.in_flight == frozenset()


def test_unknown_tool_name_is_escaped_and_bounded(ready: Dispatcher) -> None:
    name = "\u202e" + "x" * 500
    message = sent(ready.handle_frame(request(4, "tools/call", {"name": name})))
    text = message["error"]["message"]
    assert "\u202e" not in text
    assert "\\u202e" in text
    assert len(text) < 200


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "name"),
        ({"name": 5}, "name"),
        ({"name": "echo", "arguments": [1]}, "arguments"),
        ({"name": "echo", "arguments": None}, "arguments"),
        ({"name": "echo", "arguments": "x"}, "arguments"),
        ({"name": "echo", "argument": {}}, "params"),
        ({"name": "echo", "text": "hi"}, "params"),
        ({"name": "echo", "requestState": "s"}, "params"),
        ({"name": "echo", "_meta": 1}, "_meta"),
    ],
)
def test_malformed_call_envelopes(ready: Dispatcher, params: dict[str, Any], field: str) -> None:
    message = sent(ready.handle_frame(request(4, "tools/call", params)))
    assert message["error"]["code"] == -32602
    assert message["error"]["data"]["invalid_params"] == [field]
    assert ready.in_flight == frozenset()


@pytest.mark.parametrize("task", [{"ttl": 60000}, {}, None, "anything"])
def test_a_task_member_is_ignored_and_the_call_runs(ready: Dispatcher, task: object) -> None:
    # 2025-11-25: a receiver without the tasks capability MUST process the request normally,
    # ignoring the task-augmentation metadata.
    params = {"name": "echo", "arguments": {"text": "hi"}, "task": task}
    action = ready.handle_frame(request(7, "tools/call", params))
    assert isinstance(action, StartCall)
    assert action.arguments == {"text": "hi"}


def test_duplicate_in_flight_id_is_refused(ready: Dispatcher) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    assert error_of(ready.handle_frame(request(7, "tools/call", {"name": "echo"}))) == (7, -32600)
    assert error_of(ready.handle_frame(request(7, "ping"))) == (7, -32600)
    assert ready.in_flight == {7}


def test_ids_of_different_types_are_different(ready: Dispatcher) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    assert isinstance(ready.handle_frame(request("7", "tools/call", {"name": "echo"})), StartCall)


def test_id_is_free_again_after_the_call_ends(ready: Dispatcher) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    ready.call_succeeded(7, {"text": ""}, '{"text":""}')
    assert isinstance(ready.handle_frame(request(7, "tools/call", {"name": "echo"})), StartCall)


@pytest.mark.parametrize(
    ("version", "structured"),
    [("2024-11-05", False), ("2025-03-26", False), ("2025-06-18", True), ("2025-11-25", True)],
)
def test_success_shape_per_revision(version: str, structured: bool) -> None:
    dispatcher = Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")
    dispatcher.handle_frame(request(0, "initialize", init_params(version)))
    dispatcher.handle_frame(request(1, "tools/call", {"name": "echo"}))
    result = sent(dispatcher.call_succeeded(1, {"text": "a"}, '{"text":"a"}'))["result"]
    assert result["content"] == [{"type": "text", "text": '{"text":"a"}'}]
    assert result["isError"] is False
    assert ("structuredContent" in result) == structured
    if structured:
        assert result["structuredContent"] == json.loads(result["content"][0]["text"])


def test_in_band_failure_shape(ready: Dispatcher) -> None:
    ready.handle_frame(request(3, "tools/call", {"name": "echo"}))
    problem = Problem.of(
        MCPErrorCode.ACCESS_DENIED,
        "'../../etc/passwd' resolves outside the sandbox",
        invalid_params=("relative_path",),
    )
    message = sent(ready.call_failed(3, problem))
    # Byte for byte the design document's example of an in-band error.
    assert json.dumps(message, separators=(",", ":")) == (
        '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text",'
        '"text":"{\\"type\\": \\"urn:mcp-server-suite:problem:access-denied\\", \\"title\\": '
        '\\"Access to the requested resource is denied\\", \\"status\\": 403, \\"detail\\": '
        '\\"\'../../etc/passwd\' resolves outside the sandbox\\", \\"code\\": '
        '\\"MCP_ACCESS_DENIED\\", \\"invalid_params\\": [\\"relative_path\\"], '
        '\\"metadata\\": {}}"}],"isError":true}}'
    )
    assert ready.in_flight == frozenset()


def test_crash_shape_carries_only_a_correlation_id(ready: Dispatcher) -> None:
    ready.handle_frame(request(3, "tools/call", {"name": "echo"}))
    error = sent(ready.call_crashed(3, "abc123"))["error"]
    assert error["code"] == -32603
    assert error["message"] == "Internal error"
    assert error["data"]["metadata"] == {"correlation_id": "abc123"}
    assert error["data"]["code"] == "MCP_INTERNAL_ERROR"


def test_cancellation_of_an_in_flight_call(ready: Dispatcher) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    cancel = frame(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    )
    assert ready.handle_frame(cancel) == CancelCall(7)
    # The id stays reserved until the task reports back.
    assert ready.in_flight == {7}
    ready.call_abandoned(7)
    assert ready.in_flight == frozenset()


@pytest.mark.parametrize(
    "params",
    [
        {"requestId": 0},
        {"requestId": 99},
        {"requestId": "7"},
        {"requestId": None},
        {"reason": "no id"},
        None,
        [7],
    ],
)
def test_cancellations_that_match_nothing_are_ignored(ready: Dispatcher, params: object) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    if params is not None:
        message["params"] = params
    assert ready.handle_frame(frame(message)) is None
    assert ready.in_flight == {7}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}},
        {"jsonrpc": "2.0", "method": "tools/execute"},
        {"jsonrpc": "2.0", "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 99, "error": {"code": -1, "message": "x"}},
        {"jsonrpc": "2.0", "id": 98, "result": {}},
    ],
)
def test_notifications_and_client_responses_get_nothing(
    dispatcher: Dispatcher, message: dict[str, Any]
) -> None:
    assert dispatcher.handle_frame(frame(message)) is None
    # Notifications and responses never choose the era.
    assert dispatcher.state is SessionState.OPENING


def test_parse_errors_are_sent_with_a_null_id(ready: Dispatcher) -> None:
    assert error_of(ready.handle_frame(b'{"id":1,"id":2}')) == (None, -32700)


def test_envelope_errors_echo_a_valid_id(ready: Dispatcher) -> None:
    assert error_of(ready.handle_frame(b'{"jsonrpc":"2.0","id":"k","method":"ping","x":1}')) == (
        "k",
        -32600,
    )


def test_oversized_frame_error(ready: Dispatcher) -> None:
    assert sent(ready.handle_frame(FrameTooLarge(1_048_576))) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Invalid request: the message exceeds the frame limit",
            "data": {"max_frame_bytes": 1_048_576},
        },
    }


def test_closing_refuses_new_requests_but_ends_calls(ready: Dispatcher) -> None:
    ready.handle_frame(request(7, "tools/call", {"name": "echo"}))
    ready.begin_closing()
    assert ready.state is SessionState.CLOSING
    message = sent(ready.handle_frame(request(8, "ping")))
    assert message["error"]["code"] == -32603
    assert message["error"]["data"]["metadata"] == {"retryable": True}
    assert "result" in sent(ready.call_succeeded(7, {"text": "a"}, '{"text":"a"}'))


def test_registry_rejects_duplicates_and_bad_names() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        ToolRegistry([RegisteredTool.loaded(ECHO), RegisteredTool.loaded(ECHO)])
    with pytest.raises(ValueError, match="invalid tool name"):
        ToolSpec("Bad Name", "t", "d", EchoParams, EchoResult, echo)
    with pytest.raises(ValueError, match="invalid tool name"):
        ToolDescription("Bad Name", "t", "d", {}, {})


def test_registry_is_an_ordered_read_only_mapping() -> None:
    other = ToolSpec("other", "Other", "d", EchoParams, EchoResult, echo)
    registry = ToolRegistry([RegisteredTool.loaded(other), RegisteredTool.loaded(ECHO)])
    assert list(registry) == ["other", "echo"]
    assert len(registry) == 2
    assert registry["echo"].spec() is ECHO


def test_tools_load_on_first_use_only() -> None:
    loads: list[str] = []
    released: list[str] = []

    def load() -> ToolSpec[Any, Any]:
        loads.append("echo")
        return ECHO

    tool = RegisteredTool(ECHO.describe(), load, release=lambda: released.append("echo"))
    assert not tool.is_loaded
    assert tool.spec() is ECHO
    assert tool.spec() is ECHO
    assert loads == ["echo"]
    assert tool.is_loaded


async def test_unloaded_tools_are_released_and_loaded_ones_closed() -> None:
    events: list[str] = []

    async def close() -> None:
        events.append("closed")

    closable = ToolSpec("closable", "C", "d", EchoParams, EchoResult, echo, close)
    unused = RegisteredTool(
        ECHO.describe(), lambda: ECHO, release=lambda: events.append("released")
    )
    used = RegisteredTool(closable.describe(), lambda: closable)
    used.spec()
    plain = RegisteredTool.loaded(ECHO)
    bare = RegisteredTool(ECHO.describe(), lambda: ECHO)
    for tool in (unused, used, plain, bare):
        await tool.aclose()
    assert events == ["released", "closed"]


def test_a_loader_must_build_the_tool_it_describes() -> None:
    other = ToolSpec("other", "Other", "d", EchoParams, EchoResult, echo)
    tool = RegisteredTool(ECHO.describe(), lambda: other)
    with pytest.raises(RuntimeError, match="built 'other'"):
        tool.spec()
