"""The MCP Inspector CLI, 2.x and 0.15, against the real server.

Each Inspector run starts the server, makes one request and prints its result; a session is
one run per method: `tools/list`, then each call of `tests.support.clients.CALLS`.

- Inspector 2.x (`@modelcontextprotocol/inspector`, on the TypeScript client 2.x, Node.js 22)
  in its modern era (`--protocol-era modern`): the whole session, every run at 2026-07-28. In
  its auto era one listing shows that it probes `server/discover` and stays modern.
- Inspector 0.15 (installed as `inspector-v0`) is kept because it is the one client here built
  on the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`), the line most MCP hosts shipped so
  far embed: a handshake-only client that opens with `initialize` and has no modern era at
  all. It runs the whole session at 2025-11-25.

The Inspector passes the server only the variables given with `-e`. A call whose result has
`isError: true` makes Inspector 2.x exit with status 5 after printing the result.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import (
    CALLS,
    Era,
    Sandbox,
    check_call,
    check_listing,
    check_session,
    check_wire,
    installed,
    make_sandbox,
    node_environment,
    server_command,
)
from tests.support.harness import REPO_ROOT, base_environment

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

INSPECTOR = ("@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
INSPECTOR_V0 = ("inspector-v0", "cli", "build", "cli.js")

# Inspector 2.x's exit status for a tool result with `isError: true`.
TOOL_IS_ERROR_STATUS = 5

# One run is about a second; only a hang comes near this.
RUN_TIMEOUT_S = 120


def server_variables(sandbox: Sandbox) -> list[str]:
    """`-e KEY=VALUE` for every variable the server needs (and coverage's, when measured)."""
    flags = []
    for key, value in base_environment(sandbox.server_environment()).items():
        flags += ["-e", f"{key}={value}"]
    return flags


def run(cli: Sequence[str], sandbox: Sandbox, home: Path, *method: str) -> Any:
    node = installed(".bin", "node")
    completed = subprocess.run(
        [str(node), *cli, *server_variables(sandbox), *server_command(sandbox), *method],
        env=node_environment(sandbox, home),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def inspector(era: Era) -> list[str]:
    return [str(installed(*INSPECTOR)), "--cli", "--format", "json", "--protocol-era", era]


def inspector_v0() -> list[str]:
    return [str(installed(*INSPECTOR_V0)), "--cli"]


def call_arguments(arguments: dict[str, Any]) -> list[str]:
    return ["--tool-args-json", json.dumps(arguments)]


def test_inspector_2_modern_session(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    cli = inspector("modern")
    listed = run(cli, sandbox, tmp_path, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)["result"]["tools"]
    results = []
    for name, arguments in CALLS:
        called = run(
            cli, sandbox, tmp_path, "--method", "tools/call", "--tool-name", name,
            *call_arguments(arguments),
        )  # fmt: skip
        result = json.loads(called.stdout)["result"]
        expected = TOOL_IS_ERROR_STATUS if result.get("isError") else 0
        assert called.returncode == expected, called.stderr
        results.append(result)
    check_session(tools, results)
    check_wire(sandbox, "modern", sessions=1 + len(CALLS))


def test_inspector_2_auto_era_probes_and_stays_modern(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    listed = run(inspector("auto"), sandbox, tmp_path, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]}
    assert {"system_metrics", "sandbox_fs_read"} <= names
    check_wire(sandbox, "auto")


def test_inspector_0_15_legacy_session(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    cli = inspector_v0()
    listed = run(cli, sandbox, tmp_path, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)["tools"]
    check_listing(tools)
    for index, (name, arguments) in enumerate(CALLS):
        pairs = [
            f"{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in arguments.items()
        ]
        flags = ["--tool-arg", *pairs] if pairs else []
        called = run(cli, sandbox, tmp_path, "--method", "tools/call", "--tool-name", name, *flags)
        assert called.returncode == 0, called.stderr
        result = json.loads(called.stdout)
        if any(not isinstance(value, str) for value in arguments.values()):
            # 0.15 turns a `key=value` into a number or boolean only when the property's
            # `type` is that one name; a nullable argument's type is [T, "null"], so the value
            # goes out as text, which the server refuses by its strict types (a limit of this
            # CLI that the documentation names; 2.x takes JSON arguments).
            assert result["isError"] is True, result
            problem = json.loads(result["content"][0]["text"])
            assert problem["invalid_params"] == list(arguments), problem
            assert "Input should be a valid" in problem["detail"], problem
            continue
        check_call(tools, index, result)
    check_wire(sandbox, "legacy", sessions=1 + len(CALLS))
