"""A 2026-07-28 session with the real server: every response against the official schema.

The server is spawned as a client would spawn it and spoken to in NDJSON. A session goes
through every kind of answer the 2026 era gives: `server/discover`, the stateless
`tools/list` and `tools/call` (a result, an in-band refusal, an unknown tool), the envelope
refusals (-32602 naming the member, -32022 with `supported` and `requested`), `initialize`
and `ping` (which 2026-07-28 does not have), a subscription acknowledged, cancelled and
closed at the end of the session, and a parse error answered with the id it could read.
Each message is checked with `tests/support/mcp_schema.py`: the schema's definition for
what it answers, plus a closed-world check of the members the server builds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite import SERVER_NAME, __version__
from tests.support.harness import ServerProcess, initialize_params
from tests.support.mcp_schema import check_modern_message

pytestmark = pytest.mark.e2e

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "e2e-modern", "version": "1.0"},
}


class ModernSession:
    """A server, and every message it wrote, each checked against the 2026 schema."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.checked = 0

    def check(self, method: str | None, message: dict[str, Any]) -> dict[str, Any]:
        check_modern_message(method, message)
        self.checked += 1
        return message

    def request(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"_meta": {**META, **(meta or {})}, **(params or {})}
        self.server.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body})
        reply = self.server.recv()
        assert reply.get("id") == request_id, reply
        return self.check(method, reply)


def test_every_response_of_a_2026_session_validates() -> None:
    server = ServerProcess({"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"})
    session = ModernSession(server)
    try:
        discovered = session.request("d", "server/discover")["result"]
        assert discovered["supportedVersions"][0] == "2026-07-28"
        identity = discovered["_meta"]["io.modelcontextprotocol/serverInfo"]
        assert (identity["name"], identity["version"]) == (SERVER_NAME, __version__)

        listing = session.request(1, "tools/list")["result"]
        assert [tool["name"] for tool in listing["tools"]] == ["system_metrics"]
        assert (listing["ttlMs"], listing["cacheScope"]) == (3_600_000, "public")

        ok = session.request(2, "tools/call", {"name": "system_metrics", "arguments": {}})
        assert ok["result"]["isError"] is False
        assert json.loads(ok["result"]["content"][0]["text"]) == ok["result"]["structuredContent"]
        refused = session.request(
            3, "tools/call", {"name": "system_metrics", "arguments": {"include_disk": "yes"}}
        )
        assert refused["result"]["isError"] is True
        unknown = session.request(4, "tools/call", {"name": "nope"})
        assert unknown["error"]["code"] == -32602

        unsupported = session.request(
            5, "tools/list", meta={"io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        )
        assert unsupported["error"]["data"] == {
            "supported": ["2026-07-28"],
            "requested": "2099-01-01",
        }
        missing = session.request(
            6, "tools/list", meta={"io.modelcontextprotocol/clientCapabilities": None}
        )
        assert missing["error"]["data"]["invalid_params"] == [
            "io.modelcontextprotocol/clientCapabilities"
        ]
        for request_id, method in ((7, "ping"), (8, "initialize"), (9, "resources/list")):
            assert session.request(request_id, method)["error"]["code"] == -32601

        # A legacy handshake on a session that speaks 2026-07-28.
        server.send(
            {"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": initialize_params()}
        )
        handshake = session.check("initialize", server.recv())
        assert handshake["error"]["code"] == -32022

        # A subscription: acknowledged with nothing honoured, then cancelled (no answer).
        server.send(
            {
                "jsonrpc": "2.0",
                "id": "sub-1",
                "method": "subscriptions/listen",
                "params": {"_meta": META, "notifications": {"toolsListChanged": True}},
            }
        )
        ack = session.check(None, server.recv())
        assert ack["params"] == {
            "_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"},
            "notifications": {},
        }
        server.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "sub-1"},
            }
        )
        # A lone surrogate in the arguments: a parse error, answered with its id.
        server.send_raw(
            b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"system_metrics",'
            b'"arguments":{"x":"\\ud800"},"_meta":' + json.dumps(META).encode() + b"}}\n"
        )
        parse_error = session.check(None, server.recv())
        assert (parse_error["id"], parse_error["error"]["code"]) == (11, -32700)
        assert parse_error["error"]["data"]["invalid_params"] == ["arguments"]

        # A subscription left open is closed with a result at the end of the session.
        server.send(
            {
                "jsonrpc": "2.0",
                "id": "sub-2",
                "method": "subscriptions/listen",
                "params": {"_meta": META, "notifications": {}},
            }
        )
        session.check(None, server.recv())
        server.close_stdin()
        closing = session.check("subscriptions/listen", server.recv())
        assert closing["id"] == "sub-2"
        assert closing["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-2"
        with pytest.raises(EOFError):
            server.recv(timeout=10)
        assert server.wait() == 0
        for marker in ("Traceback", "ResourceWarning", "Exception ignored"):
            assert marker not in server.stderr, server.stderr
        assert session.checked == 15
    finally:
        server.kill()


def test_a_first_call_in_2026_runs_and_its_cancellation_right_behind_it_is_honoured() -> None:
    # The first request is a call: the blocking phase hands it over unstarted, and a
    # cancellation written in the same write reaches it on the event loop.
    server = ServerProcess({"MCP_METRICS_CPU_SAMPLE_SECONDS": "2"})
    session = ModernSession(server)
    try:
        call = {
            "jsonrpc": "2.0",
            "id": "first",
            "method": "tools/call",
            "params": {"name": "system_metrics", "arguments": {}, "_meta": META},
        }
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "first"},
        }
        marker = {
            "jsonrpc": "2.0",
            "id": "after",
            "method": "tools/list",
            "params": {"_meta": META},
        }
        server.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in (call, cancel, marker)))
        reply = session.check("tools/list", server.recv())
        assert reply["id"] == "after"
        server.expect_silence(2.5)  # the cancelled call is never answered
        server.close_stdin()
        assert server.wait() == 0
        # A call as the first request, not cancelled, is answered.
        second = ServerProcess({"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"})
        try:
            second.send(call)
            answer = ModernSession(second).check("tools/call", second.recv())
            assert answer["result"]["isError"] is False
            second.close_stdin()
            assert second.wait() == 0
        finally:
            second.kill()
    finally:
        server.kill()


def test_the_audit_trail_names_the_client_of_each_2026_call(tmp_path: Path) -> None:
    # A 2026 client has no handshake: who it is comes with each request, and each call's
    # record carries it, even for the first call, which the blocking phase hands over.
    log = tmp_path / "audit.jsonl"
    server = ServerProcess({"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01", "MCP_AUDIT_LOG": str(log)})
    session = ModernSession(server)
    try:
        session.request(1, "tools/call", {"name": "system_metrics", "arguments": {}})
        other = {"io.modelcontextprotocol/clientInfo": {"name": "other", "version": "2"}}
        session.request(2, "tools/call", {"name": "system_metrics", "arguments": {}}, meta=other)
        server.close_stdin()
        assert server.wait() == 0
    finally:
        server.kill()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(record["request_id"], record["client"], record["outcome"]) for record in records] == [
        (1, {"name": "e2e-modern", "version": "1.0"}, "ok"),
        (2, {"name": "other", "version": "2"}, "ok"),
    ]
