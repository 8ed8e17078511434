"""The dispatcher in the 2026-07-28 era, and how a session chooses its era.

Every response a 2026 session produces here is checked against the official 2026-07-28
schema (`tests/support/mcp_schema.py`), with the closed-world check of its members.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mcp_server_suite import SERVER_NAME, SERVER_TITLE
from mcp_server_suite.core import modern
from mcp_server_suite.core.methods import CACHE_TTL_MS, INSTRUCTIONS, SERVER_DESCRIPTION
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry
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
    MODERN_VERSIONS,
    REVISIONS,
    SUPPORTED_VERSIONS,
    Era,
    modern_revision,
)
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools.catalog import load_catalog
from tests.support.mcp_schema import assert_invalid, check_modern_message, validate
from tests.unit.test_core import ECHO, init_params, request

PV = modern.PROTOCOL_VERSION_KEY
CAPS = modern.CLIENT_CAPABILITIES_KEY
INFO = modern.CLIENT_INFO_KEY
LEVEL = modern.LOG_LEVEL_KEY
SUB = modern.SUBSCRIPTION_ID_KEY


def state_of(dispatcher: Dispatcher) -> SessionState:
    """The state, read afresh (a property mypy would otherwise keep narrowed)."""
    return dispatcher.state


def meta(**extra: Any) -> dict[str, Any]:
    """A well-formed 2026-07-28 `_meta`, with `extra` members replaced or added."""
    base: dict[str, Any] = {
        PV: "2026-07-28",
        CAPS: {},
        INFO: {"name": "modern-client", "version": "2.0"},
    }
    for key, value in extra.items():
        base[{"pv": PV, "caps": CAPS, "info": INFO, "level": LEVEL}.get(key, key)] = value
    return base


def modern_request(
    request_id: object, method: str, params: dict[str, Any] | None = None, **meta_extra: Any
) -> bytes:
    return request(request_id, method, {"_meta": meta(**meta_extra), **(params or {})})


class Session:
    """A dispatcher, and every message it sent, each checked against the 2026 schema."""

    def __init__(self) -> None:
        self.dispatcher = Dispatcher(
            ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="3.1"
        )

    def send(self, frame: bytes) -> Any:
        action = self.dispatcher.handle_frame(frame)
        if isinstance(action, Send):
            method = None
            with contextlib.suppress(ValueError):
                method = json.loads(frame).get("method")
            check_modern_message(method, dict(action.message))
        return action

    def message(self, frame: bytes) -> dict[str, Any]:
        action = self.send(frame)
        assert isinstance(action, Send), action
        return dict(action.message)

    def finish(self, method: str, action: Send) -> dict[str, Any]:
        check_modern_message(method, dict(action.message))
        return dict(action.message)


@pytest.fixture
def session() -> Session:
    return Session()


# --------------------------------------------------------------------------------------------
# Revisions
# --------------------------------------------------------------------------------------------


def test_the_modern_row_and_its_lookup() -> None:
    assert MODERN_VERSIONS == ("2026-07-28",)
    assert SUPPORTED_VERSIONS[0] == "2026-07-28"
    revision = modern_revision("2026-07-28")
    assert revision is not None
    assert revision.era is Era.MODERN
    assert revision.result_type
    assert revision.cache_hints
    # The two eras never borrow each other's versions.
    assert modern_revision("2025-11-25") is None
    assert modern_revision("2099-01-01") is None
    assert not any(REVISIONS[v].result_type for v in SUPPORTED_VERSIONS if v not in MODERN_VERSIONS)


# --------------------------------------------------------------------------------------------
# server/discover, tools/list, tools/call
# --------------------------------------------------------------------------------------------


def test_the_instructions_name_every_tool() -> None:
    # Both eras hand the model these instructions: a tool they leave out is one the model
    # learns of only from the list, without the hint of when to use it.
    for name in load_catalog():
        assert name in INSTRUCTIONS


def test_discover_result(session: Session) -> None:
    result = session.message(modern_request("d", "server/discover"))["result"]
    assert result == {
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": {"tools": {"listChanged": False}},
        "instructions": INSTRUCTIONS,
        "ttlMs": CACHE_TTL_MS,
        "cacheScope": "public",
        "resultType": "complete",
        "_meta": {
            "io.modelcontextprotocol/serverInfo": {
                "name": SERVER_NAME,
                "version": "3.1",
                "title": SERVER_TITLE,
                "description": SERVER_DESCRIPTION,
            }
        },
    }


def test_discover_does_not_choose_the_era(session: Session) -> None:
    session.message(modern_request(1, "server/discover"))
    session.message(modern_request(2, "server/discover"))
    assert session.dispatcher.state is SessionState.OPENING
    # A client that probed may still fall back to the handshake.
    result = session.dispatcher.handle_frame(request(3, "initialize", init_params()))
    assert isinstance(result, Send)
    assert result.message["result"]["protocolVersion"] == "2025-11-25"
    assert state_of(session.dispatcher) is SessionState.READY


def test_tools_list_result(session: Session) -> None:
    result = session.message(modern_request(1, "tools/list"))["result"]
    assert session.dispatcher.state is SessionState.STATELESS
    (tool,) = result["tools"]
    assert set(tool) == {
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
    }
    assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (
        CACHE_TTL_MS,
        "public",
        "complete",
    )
    assert "nextCursor" not in result
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["version"] == "3.1"


def test_tools_list_accepts_unknown_members_and_refuses_a_cursor(session: Session) -> None:
    assert "result" in session.message(modern_request(1, "tools/list", {"x-extra": [1]}))
    error = session.message(modern_request(2, "tools/list", {"cursor": "c"}))["error"]
    assert (error["code"], error["data"]["code"]) == (-32602, "MCP_INVALID_CURSOR")


def test_tools_call_carries_the_client_of_the_request(session: Session) -> None:
    action = session.send(
        modern_request(7, "tools/call", {"name": "echo", "arguments": {"text": "a"}})
    )
    assert isinstance(action, StartCall)
    assert action.client == ClientInfo("modern-client", "2.0")
    assert action.arguments == {"text": "a"}
    # Each request says who sent it; nothing is kept between them.
    other = session.send(
        modern_request(8, "tools/call", {"name": "echo"}, info={"name": "b", "version": "9"})
    )
    assert isinstance(other, StartCall)
    assert other.client == ClientInfo("b", "9")
    anonymous = session.send(
        request(9, "tools/call", {"name": "echo", "_meta": {PV: "2026-07-28", CAPS: {}}})
    )
    assert isinstance(anonymous, StartCall)
    assert anonymous.client is None
    assert session.dispatcher.client is None


def test_client_info_from_meta_is_bounded(session: Session) -> None:
    long = {"name": "n" * 9000, "version": "v" * 9000}
    action = session.send(modern_request(1, "tools/call", {"name": "echo"}, info=long))
    assert isinstance(action, StartCall)
    assert action.client == ClientInfo("n" * MAX_CLIENT_INFO_CHARS, "v" * MAX_CLIENT_INFO_CHARS)


def test_call_replies_are_shaped_to_2026(session: Session) -> None:
    session.send(modern_request(1, "tools/call", {"name": "echo"}))
    session.send(modern_request(2, "tools/call", {"name": "echo"}))
    session.send(modern_request(3, "tools/call", {"name": "echo"}))
    ok = session.finish(
        "tools/call", session.dispatcher.call_succeeded(1, {"text": "a"}, '{"text":"a"}')
    )
    assert ok["result"]["structuredContent"] == {"text": "a"}
    assert ok["result"]["resultType"] == "complete"
    problem = Problem.of(MCPErrorCode.VALIDATION_ERROR, "no")
    failed = session.finish("tools/call", session.dispatcher.call_failed(2, problem))
    assert failed["result"]["isError"] is True
    crashed = session.finish("tools/call", session.dispatcher.call_crashed(3, "c0ffee"))
    assert crashed["error"]["code"] == -32603
    assert session.dispatcher.in_flight == frozenset()


@pytest.mark.parametrize(
    "extra",
    [
        {"task": {"ttl": 1000}},
        {"inputResponses": {"k": {"action": "accept"}}},
        {"requestState": "s"},
    ],
)
def test_members_the_revision_defines_are_ignored(session: Session, extra: dict[str, Any]) -> None:
    action = session.send(modern_request(1, "tools/call", {"name": "echo", **extra}))
    assert isinstance(action, StartCall)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"name": "echo", "argument": {}}, "params"),
        ({"name": 1}, "name"),
        ({"name": "echo", "arguments": []}, "arguments"),
        ({"name": "nope"}, "name"),
    ],
)
def test_malformed_calls(session: Session, params: dict[str, Any], field: str) -> None:
    error = session.message(modern_request(1, "tools/call", params))["error"]
    assert (error["code"], error["data"]["invalid_params"]) == (-32602, [field])
    assert session.dispatcher.in_flight == frozenset()


def test_ids_stay_reserved_while_a_call_runs_and_cancel_works(session: Session) -> None:
    session.send(modern_request(5, "tools/call", {"name": "echo"}))
    assert session.message(modern_request(5, "tools/list"))["error"]["code"] == -32600
    cancel = json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
    )
    assert session.send(cancel.encode()) == CancelCall(5)


# --------------------------------------------------------------------------------------------
# The envelope
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_meta", "faults"),
    [
        ({PV: "2026-07-28"}, [CAPS]),
        ({PV: 20260728, CAPS: {}}, [PV]),
        ({PV: None, CAPS: {}}, [PV]),
        ({PV: "2026-07-28", CAPS: []}, [CAPS]),
        ({PV: "2026-07-28", CAPS: {}, INFO: {"name": "x"}}, [INFO]),
        ({PV: "2026-07-28", CAPS: {}, INFO: "x"}, [INFO]),
        ({PV: "2026-07-28", CAPS: {}, INFO: None}, [INFO]),
        ({PV: "2026-07-28", CAPS: {}, LEVEL: "verbose"}, [LEVEL]),
        ({PV: "2026-07-28", CAPS: {}, LEVEL: 3}, [LEVEL]),
        ({PV: [1], CAPS: 1, LEVEL: "DEBUG"}, [PV, CAPS, LEVEL]),
    ],
)
def test_malformed_envelopes_are_invalid_params_naming_the_member(
    session: Session, bad_meta: dict[str, Any], faults: list[str]
) -> None:
    error = session.message(request(1, "tools/list", {"_meta": bad_meta}))["error"]
    assert error["code"] == -32602
    assert error["data"]["code"] == "MCP_INVALID_PARAMS"
    assert error["data"]["invalid_params"] == faults
    # A refused request does not choose the era.
    assert session.dispatcher.state is SessionState.OPENING


@pytest.mark.parametrize(
    "level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
)
def test_every_log_level_is_accepted(session: Session, level: str) -> None:
    assert "result" in session.message(modern_request(1, "tools/list", level=level))


def test_unknown_meta_members_are_accepted(session: Session) -> None:
    extra: dict[str, Any] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
        "progressToken": 3,
    }
    assert "result" in session.message(modern_request(1, "tools/list", **extra))


def test_unsupported_versions_before_and_after_the_era_is_chosen(session: Session) -> None:
    before = session.message(modern_request(1, "tools/list", pv="1900-01-01"))["error"]
    assert before == {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": list(SUPPORTED_VERSIONS), "requested": "1900-01-01"},
    }
    assert session.dispatcher.state is SessionState.OPENING
    # A legacy version is reached through initialize, never through _meta.
    legacy = session.message(modern_request(2, "server/discover", pv="2025-11-25"))["error"]
    assert legacy["code"] == -32022
    session.message(modern_request(3, "tools/list"))
    after = session.message(modern_request(4, "tools/list", pv="2027-01-01"))["error"]
    assert after["data"] == {"supported": ["2026-07-28"], "requested": "2027-01-01"}


def test_discovery_and_the_version_error_name_the_same_versions(session: Session) -> None:
    # A client may read either list and retry with a version from it: they must agree,
    # before the era is chosen (every version) and after (the modern ones alone).
    for pinned in (False, True):
        discovered = session.message(modern_request("d", "server/discover"))["result"]
        refused = session.message(modern_request("r", "tools/list", pv="1900-01-01"))["error"]
        assert discovered["supportedVersions"] == refused["data"]["supported"]
        expected = MODERN_VERSIONS if pinned else SUPPORTED_VERSIONS
        assert discovered["supportedVersions"] == list(expected)
        session.message(modern_request("pin", "tools/list"))


def test_an_overlong_requested_version_is_echoed_bounded(session: Session) -> None:
    error = session.message(modern_request(1, "tools/list", pv="v" * 100_000))["error"]
    assert error["data"]["requested"] == "v" * 64


# The `LoggingLevel` values of the 2026 schema.
LEVELS = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}


@given(
    st.dictionaries(
        st.sampled_from([PV, CAPS, INFO, LEVEL, "progressToken", "x"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**53) + 1, 2**53 - 1),
            st.text(max_size=12),
            st.sampled_from(["2026-07-28", "2025-11-25", "debug"]),
            st.dictionaries(st.sampled_from(["name", "version"]), st.text(max_size=4)),
            st.lists(st.integers(-(2**53) + 1, 2**53 - 1), max_size=2),
        ),
    )
)
@example({PV: "2026-07-28", CAPS: {}, LEVEL: {}})
@example({PV: "2026-07-28", CAPS: {}, LEVEL: []})
def test_any_meta_is_accepted_refused_or_told_to_retry(bad_meta: dict[str, Any]) -> None:
    session = Session()
    message = session.message(request(1, "tools/list", {"_meta": bad_meta}))
    info = bad_meta.get(INFO)
    level = bad_meta.get(LEVEL, "info")
    valid = (
        bad_meta.get(PV) == "2026-07-28"
        and isinstance(bad_meta.get(CAPS), dict)
        and (
            INFO not in bad_meta
            or (
                isinstance(info, dict)
                and isinstance(info.get("name"), str)
                and isinstance(info.get("version"), str)
            )
        )
        and isinstance(level, str)
        and level in LEVELS
    )
    if valid:
        assert "result" in message
    elif PV not in bad_meta:
        # Without the version member the request does not claim the modern era at all: a
        # legacy session is opened, and tools/list must wait for initialize.
        assert message["error"]["code"] == -32600
    else:
        assert message["error"]["code"] in {-32602, -32022}


# --------------------------------------------------------------------------------------------
# Choosing the era
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/list", "tasks/list"]
)
def test_methods_2026_lacks_are_unknown_even_with_the_modern_meta(
    session: Session, method: str
) -> None:
    params = init_params() if method == "initialize" else {}
    error = session.message(modern_request(1, method, params))["error"]
    assert error["code"] == -32601
    assert session.dispatcher.state is SessionState.STATELESS


def test_a_modern_request_pins_the_era_and_initialize_is_then_refused(session: Session) -> None:
    session.message(modern_request(1, "tools/list"))
    error = session.message(request(2, "initialize", init_params("2025-06-18")))["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": ["2026-07-28"], "requested": "2025-06-18"}
    odd = session.message(request(3, "initialize", {"protocolVersion": 7}))["error"]
    assert odd["data"]["requested"] == ""
    bare = session.message(request(4, "initialize"))["error"]
    assert bare["code"] == -32022
    # Requests without the envelope are malformed 2026 requests.
    missing = session.message(request(5, "tools/list"))["error"]
    assert (missing["code"], missing["data"]["invalid_params"]) == (-32602, ["_meta"])
    assert session.dispatcher.state is SessionState.STATELESS


def test_a_legacy_opening_refuses_modern_requests() -> None:
    dispatcher = Dispatcher(ToolRegistry([RegisteredTool.loaded(ECHO)]), server_version="1")
    dispatcher.handle_frame(request(0, "ping"))
    assert dispatcher.state is SessionState.AWAITING_INIT
    for state_before in ("awaiting", "ready"):
        if state_before == "ready":
            dispatcher.handle_frame(request(1, "initialize", init_params()))
        action = dispatcher.handle_frame(modern_request(2, "server/discover"))
        assert isinstance(action, Send)
        error = action.message["error"]
        assert error["code"] == -32600
        assert "initialize" in error["message"]
    assert state_of(dispatcher) is SessionState.READY


def test_a_legacy_meta_does_not_claim_the_modern_era() -> None:
    assert not modern.claims_modern_era({"_meta": {"progressToken": 1}})
    assert not modern.claims_modern_era({"_meta": [PV]})
    assert not modern.claims_modern_era(None)
    assert modern.claims_modern_era({"_meta": {PV: None}})


def test_closing_refuses_modern_requests_too(session: Session) -> None:
    session.message(modern_request(1, "tools/list"))
    session.dispatcher.begin_closing()
    error = session.message(modern_request(2, "tools/list"))["error"]
    assert (error["code"], error["data"]["metadata"]) == (-32603, {"retryable": True})


# --------------------------------------------------------------------------------------------
# subscriptions/listen
# --------------------------------------------------------------------------------------------


def listen(request_id: object, wanted: object = None) -> bytes:
    return modern_request(
        request_id,
        "subscriptions/listen",
        {"notifications": wanted if wanted is not None else {"toolsListChanged": True}},
    )


def cancelled(request_id: object) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    ).encode()


def test_listen_is_acknowledged_with_nothing_honoured(session: Session) -> None:
    wanted = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["file:///x"],
    }
    ack = session.message(listen("s1", wanted))
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUB: "s1"}, "notifications": {}},
    }
    assert session.dispatcher.subscriptions == {"s1"}
    assert session.dispatcher.state is SessionState.STATELESS


def test_an_open_subscription_holds_its_id_until_cancelled_without_a_response(
    session: Session,
) -> None:
    session.message(listen(4))
    assert session.message(modern_request(4, "tools/list"))["error"]["code"] == -32600
    assert session.send(cancelled(4)) is None
    assert session.dispatcher.subscriptions == frozenset()
    assert "result" in session.message(modern_request(4, "tools/list"))


def test_open_subscriptions_are_closed_with_a_result_at_the_end(session: Session) -> None:
    session.message(listen(1))
    session.message(listen("two"))
    session.dispatcher.begin_closing()
    closing = [
        session.finish("subscriptions/listen", send)
        for send in session.dispatcher.close_subscriptions()
    ]
    assert [message["id"] for message in closing] == [1, "two"]
    assert closing[0]["result"]["_meta"][SUB] == 1
    assert closing[1]["result"]["_meta"][SUB] == "two"
    assert session.dispatcher.close_subscriptions() == []


def test_the_number_of_open_subscriptions_is_bounded(session: Session) -> None:
    for index in range(modern.MAX_SUBSCRIPTIONS):
        assert "method" in session.message(listen(index))
    refused = session.message(listen("one-too-many"))["error"]
    assert refused["code"] == -32603
    assert refused["data"]["metadata"] == {"max_subscriptions": modern.MAX_SUBSCRIPTIONS}
    session.send(cancelled(0))
    assert "method" in session.message(listen("room-again"))


@pytest.mark.parametrize(
    "wanted",
    [
        [],
        "all",
        {"toolsListChanged": "yes"},
        {"resourceSubscriptions": "file:///x"},
        {"resourceSubscriptions": [1]},
    ],
)
def test_a_malformed_filter_is_invalid_params(session: Session, wanted: object) -> None:
    error = session.message(listen(1, wanted))["error"]
    assert (error["code"], error["data"]["invalid_params"]) == (-32602, ["notifications"])
    missing = session.message(modern_request(2, "subscriptions/listen"))["error"]
    assert missing["data"]["invalid_params"] == ["notifications"]


# --------------------------------------------------------------------------------------------
# The schema checks themselves
# --------------------------------------------------------------------------------------------


def test_the_schema_checks_catch_a_missing_result_type_and_an_undeclared_member() -> None:
    listing = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"tools": [], "ttlMs": 1, "cacheScope": "public", "_meta": {}},
    }
    assert_invalid("ListToolsResultResponse", listing)
    assert_invalid(
        "DiscoverResult",
        {
            "resultType": "complete",
            "supportedVersions": [],
            "capabilities": {},
            "ttlMs": -1,
            "cacheScope": "public",
        },
    )
    assert_invalid(
        "UnsupportedProtocolVersionError",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32022, "message": "m", "data": {"supported": []}},
        },
    )
    complete = {**listing["result"], "resultType": "complete", "surprise": 1}  # type: ignore[dict-item]
    validate("ListToolsResult", complete)
    with pytest.raises(AssertionError):
        check_modern_message("tools/list", {**listing, "result": complete})


def test_the_2026_opening_needs_neither_the_event_loop_nor_a_tool_dependency() -> None:
    # What start-up runs before the first 2026 answers: the entry point's imports, then the
    # dispatcher on server/discover and a stateless tools/list.
    probe = textwrap.dedent(
        """
        import json, sys, tempfile
        from pathlib import Path
        import mcp_server_suite.__main__
        from mcp_server_suite.config import SecretStr, Settings
        from mcp_server_suite.core.server import Dispatcher
        from mcp_server_suite.tools import build_registry

        settings = Settings(
            safe_data_dir=Path(tempfile.mkdtemp()),
            sql_dsn=SecretStr("postgresql://u@h/db"),
        )
        dispatcher = Dispatcher(build_registry(settings), server_version="1")
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        for request_id, method in ((1, "server/discover"), (2, "tools/list")):
            params = {"_meta": meta}
            request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            answer = dispatcher.handle_frame(json.dumps(request).encode())
            assert "result" in answer.message, answer
        heavy = ("asyncio", "pydantic", "psutil", "psycopg", "sqlglot", "ctypes")
        print(sorted(name for name in heavy if name in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


@pytest.mark.parametrize("ending", ["succeeded", "failed", "crashed"])
@pytest.mark.parametrize("opening", ["legacy", "modern"])
def test_a_withheld_reply_keeps_the_shape_of_the_reply_it_replaces(
    opening: str, ending: str
) -> None:
    session = Session()
    if opening == "legacy":
        session.dispatcher.handle_frame(request(0, "initialize", init_params()))
        session.dispatcher.handle_frame(request(1, "tools/call", {"name": "echo"}))
    else:
        session.send(modern_request(1, "tools/call", {"name": "echo"}))
    problem = Problem.of(MCPErrorCode.INTERNAL_ERROR, "withheld", metadata={"retryable": True})
    if ending == "succeeded":
        reply = session.dispatcher.call_succeeded(1, {"text": "a" * 100}, '{"text": "a"}')
    elif ending == "failed":
        reply = session.dispatcher.call_failed(1, Problem.of(MCPErrorCode.ACCESS_DENIED, "no"))
    else:
        reply = session.dispatcher.call_crashed(1, "c0ffee")
    withheld = dict(session.dispatcher.reply_withheld(reply, problem).message)
    assert withheld["id"] == 1
    result = withheld["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    assert json.loads(result["content"][0]["text"])["metadata"] == {"retryable": True}
    assert ("resultType" in result) == (opening == "modern")
    if opening == "modern":
        check_modern_message("tools/call", withheld)


def test_only_a_calls_reply_can_be_withheld() -> None:
    session = Session()
    answer = session.send(modern_request(1, "server/discover"))
    problem = Problem.of(MCPErrorCode.INTERNAL_ERROR, "withheld")
    with pytest.raises(ValueError, match="only a call's reply"):
        session.dispatcher.reply_withheld(answer, problem)


def test_finishing_a_call_that_is_not_in_flight_is_a_bug_in_the_shell() -> None:
    session = Session()
    with pytest.raises(RuntimeError, match="no call with this id"):
        session.dispatcher.call_succeeded(99, {}, "{}")
    # Forgetting one is harmless, whatever it was.
    session.dispatcher.call_abandoned(99)


@pytest.mark.parametrize(
    "params",
    [None, {}, {"_meta": {}}, {"_meta": {"progressToken": 1}}, {"_meta": []}, []],
    ids=["no-params", "no-meta", "empty-meta", "legacy-meta", "meta-not-an-object", "array"],
)
def test_a_first_discovery_without_its_meta_is_invalid_params_and_does_not_choose(
    session: Session, params: Any
) -> None:
    # Issue 21: it used to open a handshake session (-32601), after which every 2026-07-28
    # request was refused with -32600. It is a 2026-07-28 request missing its required
    # fields: -32602, and the era stays open.
    error = session.message(request(1, "server/discover", params))["error"]
    assert error["code"] == -32602
    assert session.dispatcher.state is SessionState.OPENING
    assert "result" in session.message(modern_request(2, "server/discover"))
    assert "result" in session.message(modern_request(3, "tools/list"))
    assert state_of(session.dispatcher) is SessionState.STATELESS
    # And a client that probed that way may still fall back to the handshake instead.
    other = Session()
    other.message(request(1, "server/discover", params))
    answer = other.dispatcher.handle_frame(request(2, "initialize", init_params()))
    assert isinstance(answer, Send)
    assert answer.message["result"]["protocolVersion"] == "2025-11-25"
    assert state_of(other.dispatcher) is SessionState.READY


def test_a_discovery_without_its_meta_in_each_state(session: Session) -> None:
    # In a 2026-07-28 session it is the same -32602; in a handshake session, which has no
    # server/discover, it is an unknown method, at once.
    session.message(modern_request(1, "tools/list"))
    assert session.message(request(2, "server/discover"))["error"]["code"] == -32602
    legacy = Session().dispatcher
    legacy.handle_frame(request(1, "initialize", init_params()))
    refused = legacy.handle_frame(request(2, "server/discover"))
    assert isinstance(refused, Send)
    assert refused.message["error"]["code"] == -32601
