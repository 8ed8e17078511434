"""What every real-client test shares: the session plan, its checks, and the Node.js clients.

Each client (the Python SDK, the TypeScript SDK, the MCP Inspector, the AI SDK) runs the same
session against the real server: it lists the tools, then calls `system_metrics` twice and
`sandbox_fs_read` twice (`CALLS`), one read refused in-band. `check_session` holds every
client to the same outcome (its parts, `check_listing` and `check_call`, serve a client that
cannot make one of the calls), and validates each successful result's `structuredContent`
against the `outputSchema` the client listed, with `jsonschema`: the clients' own checks differ
(the TypeScript client and the SDK's session check, the Inspector prints, the AI SDK checks
nothing), so this one is common. The server runs behind `tests.support.wiretap`, and
`check_wire` checks what crossed the wire: the era the client chose, and every server
message against the official schema of its revision (`tests.support.wire_schema`).

The Node.js programs are installed by `scripts/install-clients.sh` into `.cache/clients`,
from the exact lock in `tests/clients/`. A missing install fails the test and says how to
install; it never skips.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.support.harness import REPO_ROOT, base_environment
from tests.support.wire_schema import (
    MODERN_VERSION,
    PROTOCOL_VERSION_META,
    validate_structured_content,
    validate_transcript,
)
from tests.support.wiretap import Transcript, read_transcripts, wiretap_command

__all__ = [
    "CALLS",
    "CLIENTS_DIR",
    "LEGACY_VERSION",
    "NODE_MODULES",
    "Era",
    "Sandbox",
    "check_call",
    "check_listing",
    "check_session",
    "check_wire",
    "installed",
    "make_sandbox",
    "node_environment",
    "run_node_client",
    "server_command",
]

CLIENTS_DIR = REPO_ROOT / ".cache" / "clients"
NODE_MODULES = CLIENTS_DIR / "node_modules"
INSTALL_COMMAND = "scripts/install-clients.sh"

# The newest handshake revision, which every legacy-mode client of today asks for.
LEGACY_VERSION = "2025-11-25"

Era = Literal["modern", "auto", "legacy"]

SANDBOX_FILE = "notes/hello.txt"
SANDBOX_TEXT = "hello from the sandbox\n"
OUTSIDE_FILE = "../secret.txt"

# The session every client runs after listing the tools, in order.
CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("system_metrics", {}),
    ("system_metrics", {"include_disk": True}),
    ("sandbox_fs_read", {"relative_path": SANDBOX_FILE}),
    ("sandbox_fs_read", {"relative_path": OUTSIDE_FILE}),
)


@dataclass(frozen=True)
class Sandbox:
    """A sandbox with one file, a secret beside it, and where the wire is recorded."""

    root: Path
    wire: Path

    def server_environment(self) -> dict[str, str]:
        """The server's own variables: both tools on, a quick CPU sample."""
        return {"MCP_SAFE_DATA_DIR": str(self.root), "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}


def make_sandbox(base: Path) -> Sandbox:
    """Build the sandbox under `base`."""
    root = base / "sandbox"
    (root / "notes").mkdir(parents=True)
    (root / SANDBOX_FILE).write_text(SANDBOX_TEXT, "utf-8")
    (base / "secret.txt").write_text("outside the sandbox\n", "utf-8")
    return Sandbox(root=root, wire=base / "wire")


def server_command(sandbox: Sandbox) -> list[str]:
    """The server, behind the wire recorder, as a client launches it."""
    return wiretap_command(sandbox.wire, [sys.executable, "-X", "dev", "-m", "mcp_server_suite"])


def installed(*relative: str) -> Path:
    """A file of the Node.js install; fails the test, naming the fix, when it is missing."""
    path = NODE_MODULES.joinpath(*relative)
    if not path.is_file():
        pytest.fail(
            f"{path.relative_to(REPO_ROOT)} is missing: run `{INSTALL_COMMAND}` from the top "
            "of the repository (it needs npm, Node.js 20 or newer)",
            pytrace=False,
        )
    return path


def node_environment(sandbox: Sandbox, home: Path) -> dict[str, str]:
    """The environment of a Node.js client: the server's variables, and a private HOME."""
    return base_environment({**sandbox.server_environment(), "HOME": str(home)})


def run_node_client(
    script: Path,
    plan: Mapping[str, Any],
    sandbox: Sandbox,
    home: Path,
    *,
    timeout: float,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run a script of `tests/clients` on `plan`; return the JSON object it printed.

    The plan gets a `server` member, how the client launches the server: `command` (by
    default `server_command(sandbox)`) with the server's environment, from the top of the
    repository. The script must exit with status 0, and nothing may print a traceback.

    Args:
        script: The Node.js script.
        plan: What the script is to do, besides launching the server.
        sandbox: The sandbox the server serves and where the wire is recorded.
        home: The client's private HOME.
        timeout: The most seconds the script may take.
        command: The command line that starts the server, if not the usual one.
    """
    node = installed(".bin", "node")
    environment = node_environment(sandbox, home)
    launch = list(command) if command is not None else server_command(sandbox)
    server = {"command": launch[0], "args": launch[1:], "env": environment, "cwd": str(REPO_ROOT)}
    run = subprocess.run(
        [str(node), str(script), json.dumps({**plan, "server": server})],
        env={**environment, "NODE_PATH": str(NODE_MODULES)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    seen: dict[str, Any] = json.loads(run.stdout)
    return seen


def _tool(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    (tool,) = [tool for tool in tools if tool["name"] == name]
    return tool


def check_listing(tools: Sequence[Mapping[str, Any]]) -> None:
    """Hold one client's view of `tools/list` to the expected tools.

    Args:
        tools: The listed tools, as wire JSON (camelCase members).
    """
    names = {tool["name"] for tool in tools}
    assert {"system_metrics", "sandbox_fs_read"} <= names, names
    for tool in tools:
        assert "outputSchema" in tool, tool["name"]
        assert tool["annotations"]["readOnlyHint"] is True, tool["name"]


def check_call(tools: Sequence[Mapping[str, Any]], index: int, result: Mapping[str, Any]) -> None:
    """Hold the result of the call `CALLS[index]` to its expected outcome.

    Args:
        tools: The listed tools, as wire JSON (camelCase members).
        index: Which call of `CALLS` it answers.
        result: The `tools/call` result, as wire JSON.
    """
    name, _ = CALLS[index]
    if index == len(CALLS) - 1:
        assert result["isError"] is True, result
        assert "structuredContent" not in result
        assert json.loads(result["content"][0]["text"])["code"] == "MCP_ACCESS_DENIED"
        return
    assert result.get("isError") is False, result
    structured = result["structuredContent"]
    validate_structured_content(_tool(tools, name)["outputSchema"], structured)
    assert json.loads(result["content"][0]["text"]) == structured
    if index == 0:
        assert structured["disk_percent_used"] is None
    elif index == 1:
        assert 0 <= structured["disk_percent_used"] <= 100
    else:
        assert structured == {
            "resolved_path": SANDBOX_FILE,
            "content": SANDBOX_TEXT,
            "offset": 0,
            "bytes_read": len(SANDBOX_TEXT.encode()),
            "next_offset": len(SANDBOX_TEXT.encode()),
            "truncated": False,
        }


def check_session(tools: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]]) -> None:
    """Hold one client's view of the session (`CALLS`) to the expected outcome.

    Args:
        tools: The listed tools, as wire JSON (camelCase members).
        results: The `tools/call` results in the order of `CALLS`, as wire JSON.
    """
    check_listing(tools)
    assert len(results) == len(CALLS)
    for index, result in enumerate(results):
        check_call(tools, index, result)


def _requests(transcript: Transcript) -> list[dict[str, Any]]:
    return [message for message in transcript.sent_by("client") if "id" in message]


def check_wire(sandbox: Sandbox, era: Era, *, sessions: int = 1) -> list[Transcript]:
    """Check what crossed the wire for a client in `era`; return the transcripts.

    Every server process must have exited with status 0 and no traceback, and every server
    message is validated against the official schema of its revision. In the
    modern and auto eras no `initialize` is sent and every request names 2026-07-28 in its
    `_meta`, and auto opens with the `server/discover` probe. In the legacy era the first
    request is `initialize` at `LEGACY_VERSION` and nothing probes.

    Args:
        sandbox: Where the wire was recorded.
        era: How the client was asked to connect.
        sessions: How many server processes the client started (one per Inspector run).
    """
    transcripts = read_transcripts(sandbox.wire)
    assert len(transcripts) == sessions, [transcript.path.name for transcript in transcripts]
    for transcript in transcripts:
        # Some clients discard the server's stderr; the relay kept it.
        assert "Traceback" not in transcript.stderr, transcript.stderr
        assert transcript.status == 0, (transcript.path.name, transcript.status, transcript.stderr)
        checked = validate_transcript(transcript)
        assert checked, transcript.path
        requests = _requests(transcript)
        methods = [request["method"] for request in requests]
        if era == "legacy":
            assert methods[0] == "initialize", methods
            assert requests[0]["params"]["protocolVersion"] == LEGACY_VERSION
            assert "server/discover" not in methods
            assert {version for version, _ in checked} == {LEGACY_VERSION}
            continue
        assert "initialize" not in methods, methods
        for request in requests:
            meta = request["params"]["_meta"]
            assert meta[PROTOCOL_VERSION_META] == MODERN_VERSION, request
            assert isinstance(meta["io.modelcontextprotocol/clientCapabilities"], dict)
        assert {version for version, _ in checked} == {MODERN_VERSION}
    if era == "auto":
        first = _requests(transcripts[0])[0]["method"]
        assert first == "server/discover", first
    return transcripts
