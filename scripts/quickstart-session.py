#!/usr/bin/env python3
"""Hold one short session with the server over stdio and say, in plain words, what it showed.

Run by scripts/quickstart.sh once the server is installed. The session is what an MCP client
does over the same pipes: the handshake, the tool list, a metrics reading, a file read from
the example sandbox and a path traversal attempt, which the server refuses in-band. The
summary names the tools offered, the reading, the file, the refusal and the audit records
the server wrote on stderr, then prints a client configuration for this clone.

Standard library only. The sandbox is `MCP_SAFE_DATA_DIR` when set, `examples/data`
otherwise; every other `MCP_*` variable of the caller reaches the server unchanged.

Usage: scripts/quickstart-session.py [--raw] -- SERVER-COMMAND...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
EXAMPLE_DATA: Final = REPO_ROOT / "examples" / "data"
PROTOCOL_VERSION: Final = "2025-11-25"
TRAVERSAL: Final = "../../etc/passwd"

# The server drains its calls within 5 s of the end of input; this covers a cold start on a
# loaded machine as well.
SESSION_TIMEOUT_S: Final = 60

# Responses are shown cut to one terminal line each (the whole lines with --raw).
ABBREVIATED_CHARS: Final = 96

GIB: Final = 1024**3


def requests() -> list[dict[str, Any]]:
    def call(request_id: int, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": dict(arguments)}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    client = {"name": "quickstart", "version": "1"}
    init = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": client}
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        call(3, "system_metrics", {"include_disk": True}),
        call(4, "sandbox_fs_read", {"relative_path": "hello.txt"}),
        call(5, "sandbox_fs_read", {"relative_path": TRAVERSAL}),
    ]


def run_session(command: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], str, float]:
    """Send every request, close stdin, and collect what the server wrote."""
    data = "".join(json.dumps(message) + "\n" for message in requests()).encode()
    started = time.monotonic()
    done = subprocess.run(
        list(command),
        input=data,
        capture_output=True,
        env=dict(env),
        timeout=SESSION_TIMEOUT_S,
        check=False,
    )
    elapsed = time.monotonic() - started
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        raise SystemExit(f"the server exited with status {done.returncode}:\n{stderr}")
    return done.stdout.decode("utf-8", "replace").splitlines(), stderr, elapsed


def result_of(responses: Mapping[int, Mapping[str, Any]], request_id: int) -> Mapping[str, Any]:
    response = responses.get(request_id)
    if response is None or "result" not in response:
        raise SystemExit(f"request {request_id} was not answered with a result: {response}")
    result: Mapping[str, Any] = response["result"]
    return result


def problem_of(result: Mapping[str, Any]) -> Mapping[str, Any]:
    problem: Mapping[str, Any] = json.loads(result["content"][0]["text"])
    return problem


def describe_tools(result: Mapping[str, Any]) -> str:
    names = [tool["name"] for tool in result["tools"]]
    text = ", ".join(names) or "none"
    if "read_only_sql" not in names:
        text += " (read_only_sql and sql_schema are off: set MCP_SQL_DSN to a PostgreSQL URI)"
    return text


def describe_metrics(result: Mapping[str, Any]) -> str:
    if result.get("isError"):
        return "refused: " + str(problem_of(result)["detail"])
    reading = result["structuredContent"]
    cpu, memory = reading["cpu"], reading["memory"]
    text = (
        f"CPU {cpu['utilization_percent']:.0f}% of {cpu['core_count']} cores "
        f"(load {cpu['load_average_1m']:.2f}); memory {memory['percent_used']:.0f}% "
        f"of {memory['total_bytes'] / GIB:.1f} GiB used"
    )
    if reading.get("disk_percent_used") is not None:
        text += f"; disk {reading['disk_percent_used']:.0f}% used"
    return text


def describe_read(result: Mapping[str, Any]) -> str:
    if result.get("isError"):
        return "refused: " + str(problem_of(result)["detail"])
    read = result["structuredContent"]
    first_line = read["content"].splitlines()[0] if read["content"] else ""
    return f"{read['resolved_path']} ({read['bytes_read']} bytes): {first_line!r}"


def describe_traversal(result: Mapping[str, Any]) -> str:
    if not result.get("isError"):
        return f"{TRAVERSAL} was NOT refused: check the sandbox configuration"
    problem = problem_of(result)
    return f"{TRAVERSAL} refused in-band with {problem['code']}: {problem['detail']}"


def split_stderr(stderr: str) -> tuple[list[Mapping[str, Any]], list[str]]:
    records: list[Mapping[str, Any]] = []
    other: list[str] = []
    for line in stderr.splitlines():
        if line.startswith('{"audit":'):
            records.append(json.loads(line))
        elif line.strip():
            other.append(line)
    return records, other


def describe_audit(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return "no records on stderr (MCP_AUDIT_LOG sends them elsewhere, or is off)"
    ordered = sorted(records, key=lambda record: str(record["request_id"]))
    outcomes = ", ".join(str(record["outcome"]) for record in ordered)
    return f"{len(records)} records on stderr, one per tools/call: {outcomes}"


def client_configuration(command: Sequence[str], sandbox: str) -> str:
    server: dict[str, Any] = {"command": command[0]}
    if len(command) > 1:
        server["args"] = list(command[1:])
    server["env"] = {"MCP_SAFE_DATA_DIR": sandbox}
    return json.dumps({"mcpServers": {"mcp-server-suite": server}}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--raw", action="store_true", help="print every response in full")
    parser.add_argument("command", nargs="+", help="the server command, after --")
    options = parser.parse_args(argv)
    command = list(options.command)
    if os.sep in command[0]:
        # Absolute, as a client's configuration needs it; not resolved, because a virtual
        # environment's interpreter is a symlink that must stay one.
        command[0] = os.path.abspath(command[0])
    env = dict(os.environ)
    env.setdefault("MCP_SAFE_DATA_DIR", str(EXAMPLE_DATA))

    lines, stderr, elapsed = run_session(command, env)
    responses = {message.get("id"): message for message in map(json.loads, lines)}
    init = result_of(responses, 1)
    server = init["serverInfo"]
    print(
        f"{server['name']} {server['version']} answered {len(lines)} requests over stdio in "
        f"{elapsed:.2f} s (protocol {init['protocolVersion']}):"
    )
    for line in lines:
        shown = line if options.raw or len(line) <= ABBREVIATED_CHARS else line[:ABBREVIATED_CHARS]
        print(f"  < {shown}{'' if shown == line else '...'}")
    records, other = split_stderr(stderr)
    rows = [
        ("tools offered", describe_tools(result_of(responses, 2))),
        ("system_metrics", describe_metrics(result_of(responses, 3))),
        ("sandbox_fs_read", describe_read(result_of(responses, 4))),
        ("path traversal", describe_traversal(result_of(responses, 5))),
        ("audit trail", describe_audit(records)),
    ]
    print()
    for label, text in rows:
        print(f"  {label:<16} {text}")
    if other:
        print("\nThe server also wrote on stderr:")
        for line in other:
            print(f"  {line}")
    print(
        "\nTo use it from an MCP client, add this to the client's configuration "
        "(docs/how-to/clients.md):\n"
    )
    print(client_configuration(command, env["MCP_SAFE_DATA_DIR"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
