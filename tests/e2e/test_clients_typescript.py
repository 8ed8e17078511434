"""The official TypeScript client (`@modelcontextprotocol/client` 2.x) against the real server.

`tests/clients/ts_client.cjs` connects with the client's `versionNegotiation` set to one of:
- `{mode: {pin: "2026-07-28"}}`: the modern era at exactly that revision, no fallback (it
  still asks `server/discover`, on a sibling process, whether the server offers it);
- `{mode: "auto"}`: probe `server/discover` (on a short-lived sibling server process, as the
  client's stdio transport does) and fall back to `initialize` on a legacy answer; against
  this server it must settle on 2026-07-28;
- `{mode: "legacy"}` (the client's default): the 2025-11-25 handshake.

It lists the tools and makes the calls of `tests.support.clients.CALLS`. `callTool` validates
each successful result's `structuredContent` against the listed `outputSchema` itself, and
the script's control call, made with the tool's schema narrowed by a member no result has,
proves that check is live: the client must refuse it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.clients import (
    CALLS,
    LEGACY_VERSION,
    Era,
    check_session,
    check_wire,
    installed,
    make_sandbox,
    run_node_client,
)
from tests.support.harness import REPO_ROOT, running_server
from tests.support.wire_schema import MODERN_VERSION

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

SCRIPT = REPO_ROOT / "tests" / "clients" / "ts_client.cjs"

# The script's mode for each era, the revision and era the client must report, and how
# many server processes it starts: pinned and auto both send `server/discover` on a
# short-lived sibling of the session's process first (pinned to check that the server offers
# the revision, auto to choose the era).
MODES: dict[Era, tuple[str, str, str, int]] = {
    "modern": (MODERN_VERSION, MODERN_VERSION, "modern", 2),
    "auto": ("auto", MODERN_VERSION, "modern", 2),
    "legacy": ("legacy", LEGACY_VERSION, "legacy", 1),
}

# A session is a few hundred milliseconds; only a hang comes near this.
SESSION_TIMEOUT_S = 120

# The client reaps its probe process with SIGTERM right after ending its input, so the signal
# lands anywhere in the server's shutdown; this many tries land in every part of it.
REAP_TRIALS = 20
# What the client waits for the probe process to exit before it sends SIGKILL.
REAP_WAIT_S = 1.0


@pytest.mark.parametrize("era", list(MODES))
def test_typescript_client(era: Era, tmp_path: Path) -> None:
    mode, version, reported_era, sessions = MODES[era]
    installed("@modelcontextprotocol", "client", "package.json")
    sandbox = make_sandbox(tmp_path)
    plan = {
        "mode": mode,
        "calls": [{"name": name, "arguments": arguments} for name, arguments in CALLS],
        "control": {"name": "sandbox_fs_read", "arguments": dict(CALLS[2][1])},
    }
    seen = run_node_client(SCRIPT, plan, sandbox, tmp_path, timeout=SESSION_TIMEOUT_S)
    assert (seen["protocolVersion"], seen["era"]) == (version, reported_era)
    assert seen["serverVersion"]["name"] == "mcp-server-suite"
    outcomes = seen["calls"]
    assert all("result" in outcome for outcome in outcomes), outcomes
    check_session(seen["tools"], [outcome["result"] for outcome in outcomes])
    control = seen["control"]["error"]
    assert (control["name"], control["code"]) == ("ProtocolError", -32602), control
    assert "does not match the tool's output schema" in control["message"]
    check_wire(sandbox, era, sessions=sessions)


def test_the_probe_process_exits_0_when_reaped_as_the_client_reaps_it() -> None:
    # StdioClientTransport._dispose: stdin.end(), then SIGTERM at once, then SIGKILL after a
    # second. The server must end with status 0 within that second, however the end of its
    # input and the signal interleave with its own shutdown.
    discover = {
        "jsonrpc": "2.0",
        "id": "server-discover-probe-1",
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    statuses = []
    for _ in range(REAP_TRIALS):
        with running_server() as server:
            server.send(discover)
            assert "result" in server.recv()
            server.close_stdin()
            server.signal(signal.SIGTERM)
            statuses.append(server.wait(REAP_WAIT_S))
            assert "Traceback" not in server.stderr, server.stderr
    assert statuses == [0] * REAP_TRIALS
