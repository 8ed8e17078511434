"""The Vercel AI SDK's MCP client (`@ai-sdk/mcp`) against the real server.

The AI SDK implements MCP itself, apart from the official SDKs, and is how many applications
give a model MCP tools (`generateText({tools: await client.tools()})`).
`tests/clients/ai_sdk_client.cjs` connects in one of the client's two modes:
- `auto` (its default): probe `server/discover` on the session's own process, falling back
  to `initialize` when the probe fails; against this server it must settle on 2026-07-28.
  Over stdio the client also falls back when the answer takes over a second, which a loaded
  machine's Python start-up can exceed, so here the script lets it wait for the answer (as
  the client's HTTP transport does);
- `legacy` (`protocolVersionDiscovery: false`): the 2025-11-25 handshake.

The fallback itself is a session too: a server that starts slower than the probe's second
gets `server/discover` and then `initialize` on one process, and must answer both; a server
made to start late shows it.

It lists the tools and makes the calls of `tests.support.clients.CALLS` through the AI SDK
tools `client.tools()` builds, as `generateText` runs them, and the session and the wire are
held to the checks every client test applies (`check_session`, `check_wire`). The AI SDK
checks no result against its `outputSchema` (it does so only for schemas the application
passes in), so `check_session` is the one such check here.

Two things this client does that users should know, and that the documentation names, are
pinned here, so a release that changes them fails and the note can change with it: it shows
the model an `isError` result as an ordinary one (its `toModelOutput` keeps no trace of the
flag), and a call it aborts is never cancelled on the server (no `notifications/cancelled`
is sent; the server runs the call to its end or its deadline).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite import SERVER_NAME, __version__
from tests.support.clients import (
    CALLS,
    LEGACY_VERSION,
    Era,
    Sandbox,
    check_session,
    check_wire,
    installed,
    make_sandbox,
    run_node_client,
    server_command,
)
from tests.support.harness import REPO_ROOT
from tests.support.wire_schema import MODERN_VERSION, validate_transcript
from tests.support.wiretap import read_transcripts

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

SCRIPT = REPO_ROOT / "tests" / "clients" / "ai_sdk_client.cjs"

# The script's mode for each era, and the revision the client must end up speaking.
MODES: dict[Era, tuple[str, str]] = {
    "auto": ("auto", MODERN_VERSION),
    "legacy": ("legacy", LEGACY_VERSION),
}

# A session is a few hundred milliseconds; only a hang comes near this.
SESSION_TIMEOUT_S = 120

# The client's close() signals the server and returns without waiting for it to exit, so the
# relay may still be recording the server's end when the client has gone.
EXIT_WAIT_S = 30.0

# The call the script aborts as soon as it is sent.
ABORTED_CALL = ("system_metrics", {"include_disk": None})

# Longer than the second the client gives the probe's answer over stdio.
SLOW_START_S = 1.5


def wait_for_the_server_to_exit(sandbox: Sandbox) -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    while any(transcript.status is None for transcript in read_transcripts(sandbox.wire)):
        assert time.monotonic() < deadline, "the server did not exit after the client closed"
        time.sleep(0.05)


def run_client(
    mode: str, sandbox: Sandbox, home: Path, *, wait_for_probe: bool = True, delay_s: float = 0
) -> dict[str, Any]:
    installed("@ai-sdk", "mcp", "package.json")
    command = server_command(sandbox)
    if delay_s:
        command = ["/bin/sh", "-c", f'sleep {delay_s}; exec "$@"', "sh", *command]
    name, arguments = ABORTED_CALL
    plan = {
        "mode": mode,
        "waitForProbe": wait_for_probe,
        "calls": [{"name": name, "arguments": arguments} for name, arguments in CALLS],
        "abort": {"name": name, "arguments": arguments},
    }
    seen = run_node_client(SCRIPT, plan, sandbox, home, timeout=SESSION_TIMEOUT_S, command=command)
    wait_for_the_server_to_exit(sandbox)
    return seen


@pytest.mark.parametrize("era", list(MODES))
def test_ai_sdk_client(era: Era, tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    mode, version = MODES[era]
    seen = run_client(mode, sandbox, tmp_path)
    assert seen["protocolVersion"] == version
    assert (seen["serverInfo"]["name"], seen["serverInfo"]["version"]) == (
        SERVER_NAME,
        __version__,
    )
    outcomes = seen["calls"]
    assert all("result" in outcome for outcome in outcomes), outcomes
    check_session(seen["tools"], [outcome["result"] for outcome in outcomes])
    (transcript,) = check_wire(sandbox, era)

    # The refused read reaches the model as an ordinary result: its problem as plain text,
    # with nothing left of `isError` (the client's doing, which the documentation names).
    refused = outcomes[3]["result"]
    assert refused["isError"] is True
    assert seen["modelOutputs"][3] == {
        "type": "content",
        "value": [{"type": "text", "text": refused["content"][0]["text"]}],
    }

    # The aborted call was sent, the client gave up on it at once, and the server was never
    # asked to cancel it.
    assert seen["aborted"]["error"]["message"] == "Request was aborted"
    requests = [message for message in transcript.sent_by("client") if "method" in message]
    calls = [message for message in requests if message["method"] == "tools/call"]
    assert len(calls) == len(CALLS) + 1
    assert calls[-1]["params"]["name"] == ABORTED_CALL[0]
    assert "notifications/cancelled" not in {message["method"] for message in requests}


def test_ai_sdk_client_falls_back_on_the_same_process_when_the_server_starts_late(
    tmp_path: Path,
) -> None:
    sandbox = make_sandbox(tmp_path)
    seen = run_client("auto", sandbox, tmp_path, wait_for_probe=False, delay_s=SLOW_START_S)
    assert seen["protocolVersion"] == LEGACY_VERSION
    check_session(seen["tools"], [outcome["result"] for outcome in seen["calls"]])
    (transcript,) = read_transcripts(sandbox.wire)
    assert "Traceback" not in transcript.stderr, transcript.stderr
    assert transcript.status == 0, transcript.stderr
    methods = [message["method"] for message in transcript.sent_by("client") if "id" in message]
    assert methods[:3] == ["server/discover", "initialize", "tools/list"], methods
    # Both handshakes are answered, each in its own revision, and the session is the legacy
    # one the client chose; every message validates against its revision's schema.
    checked = validate_transcript(transcript)
    assert checked[:2] == [(MODERN_VERSION, "server/discover"), (LEGACY_VERSION, "initialize")]
    assert {version for version, _ in checked[2:]} == {LEGACY_VERSION}
