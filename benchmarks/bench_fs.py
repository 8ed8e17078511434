"""Benchmark `sandbox_fs_read` against two other MCP file servers, side by side in one run.

The servers, each reading the same small file through its own read tool:

- this server (`python -m mcp_server_suite`, `sandbox_fs_read`);
- the reference TypeScript server `@modelcontextprotocol/server-filesystem` from npm
  (`read_text_file`), installed into `.cache/bench-node` on first use;
- the MCP SDK's `MCPServer` with a naive read tool (`benchmarks/sdk_fs_server.py`).

All three are driven by the same raw NDJSON client over pipes (not the SDK client), so the
figures measure the servers. Each server is measured on its own, after a warm-up, twice per
round: one request at a time, then with 16 requests in flight. Every response is checked to
carry exactly the file's text. The table shows the median of the rounds.

Usage:
    python benchmarks/bench_fs.py [--sequential N] [--pipelined N] [--rounds R] [--no-node]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndjson_client import NDJSONClient, ServerFailed

__all__ = ["main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE_PREFIX = REPO_ROOT / ".cache" / "bench-node"
NODE_PACKAGE = "@modelcontextprotocol/server-filesystem"
NODE_ENTRY = NODE_PREFIX / "node_modules" / NODE_PACKAGE / "dist" / "index.js"

# The design document's concurrency default, and the depth the targets are stated at.
IN_FLIGHT = 16

# Warm-up requests before each measurement: enough for imports, caches and thread pools.
WARM_UP = 300

# A small text file: a few lines, well under one page.
SMALL_FILE_TEXT = "The quick brown fox jumps over the lazy dog.\n" * 8

# What each request may take before the benchmark gives up on a server.
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Contender:
    """One server under test and how to ask it for the file."""

    name: str
    command: Sequence[str]
    env: Mapping[str, str]
    tool: str
    arguments: Mapping[str, Any]
    text_of: Callable[[dict[str, Any]], str]


def _structured_content(result: dict[str, Any]) -> str:
    text: str = result["structuredContent"]["content"]
    return text


def _first_text_block(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


def _request(contender: Contender, request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": contender.tool, "arguments": dict(contender.arguments)},
    }


def _check(contender: Contender, reply: dict[str, Any], expected: str) -> None:
    result = reply.get("result")
    if result is None or result.get("isError"):
        raise ServerFailed(f"{contender.name}: {json.dumps(reply)[:500]}")
    if contender.text_of(result) != expected:
        raise ServerFailed(f"{contender.name}: returned other text than the file holds")


def run_sequential(client: NDJSONClient, contender: Contender, count: int, expected: str) -> float:
    """Send `count` requests one at a time; return requests per second."""
    started = time.perf_counter()
    for request_id in range(count):
        client.send(_request(contender, request_id))
        _check(contender, client.receive(), expected)
    return count / (time.perf_counter() - started)


def run_pipelined(client: NDJSONClient, contender: Contender, count: int, expected: str) -> float:
    """Keep `IN_FLIGHT` requests outstanding until `count` are answered; return req/s."""
    started = time.perf_counter()
    sent = 0
    while sent < min(IN_FLIGHT, count):
        client.send(_request(contender, sent))
        sent += 1
    for _ in range(count):
        _check(contender, client.receive(), expected)
        if sent < count:
            client.send(_request(contender, sent))
            sent += 1
    return count / (time.perf_counter() - started)


def ensure_node_server() -> str:
    """Install the reference server with npm if it is missing; return its version."""
    if not NODE_ENTRY.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is not installed; run with --no-node")
        subprocess.run([npm, "install", "--prefix", str(NODE_PREFIX), NODE_PACKAGE], check=True)
    manifest = json.loads((NODE_ENTRY.parents[1] / "package.json").read_text("utf-8"))
    version: str = manifest["version"]
    return version


def contenders(data_dir: Path, *, with_node: bool) -> list[Contender]:
    """The servers to compare, reading `small.txt` in `data_dir`."""
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    # PYTHONPATH passes through, so another checkout's src/ can be measured with this venv.
    if "PYTHONPATH" in os.environ:
        base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    servers = [
        Contender(
            name="mcp-server-suite (sandbox_fs_read)",
            command=[sys.executable, "-m", "mcp_server_suite"],
            env=base_env | {"MCP_SAFE_DATA_DIR": str(data_dir), "MCP_METRICS_ENABLED": "false"},
            tool="sandbox_fs_read",
            arguments={"relative_path": "small.txt"},
            text_of=_structured_content,
        ),
    ]
    if with_node:
        node = shutil.which("node") or "node"
        servers.append(
            Contender(
                name="reference TypeScript server (read_text_file)",
                command=[node, str(NODE_ENTRY), str(data_dir)],
                env=base_env,
                tool="read_text_file",
                arguments={"path": str(data_dir / "small.txt")},
                text_of=_first_text_block,
            )
        )
    servers.append(
        Contender(
            name="SDK MCPServer, naive tool (read_text_file)",
            command=[sys.executable, str(REPO_ROOT / "benchmarks" / "sdk_fs_server.py")],
            env=base_env | {"BENCH_ROOT": str(data_dir)},
            tool="read_text_file",
            arguments={"path": "small.txt"},
            text_of=_first_text_block,
        )
    )
    return servers


@dataclass(frozen=True)
class Figures:
    """One server's medians: requests per second and server CPU microseconds per request."""

    sequential_rate: float
    pipelined_rate: float
    sequential_cpu_us: float
    pipelined_cpu_us: float


def measure(
    contender: Contender, expected: str, *, sequential: int, pipelined: int, rounds: int
) -> Figures:
    """Median figures over `rounds` rounds of each mode."""
    client = NDJSONClient(contender.command, contender.env, "bench-fs")
    samples: dict[str, list[float]] = {"seq": [], "pipe": [], "seq_cpu": [], "pipe_cpu": []}
    try:
        client.handshake()
        run_pipelined(client, contender, WARM_UP, expected)
        for _ in range(rounds):
            for mode, run, count in (
                ("seq", run_sequential, sequential),
                ("pipe", run_pipelined, pipelined),
            ):
                cpu_before = client.cpu_seconds()
                samples[mode].append(run(client, contender, count, expected))
                samples[f"{mode}_cpu"].append((client.cpu_seconds() - cpu_before) / count * 1e6)
    except ServerFailed as exc:
        raise ServerFailed(f"{exc}\nstderr:\n{client.stderr()}") from None
    finally:
        client.close()
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return Figures(medians["seq"], medians["pipe"], medians["seq_cpu"], medians["pipe_cpu"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; the exit status is 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=3000, help="requests per round")
    parser.add_argument("--pipelined", type=int, default=10000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-node", action="store_true", help="skip the TypeScript server")
    options = parser.parse_args(argv)

    node_version = None if options.no_node else ensure_node_server()
    figures: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fs-") as scratch:
        data_dir = Path(scratch).resolve()
        (data_dir / "small.txt").write_text(SMALL_FILE_TEXT, "utf-8")
        for contender in contenders(data_dir, with_node=not options.no_node):
            figures[contender.name] = measure(
                contender,
                SMALL_FILE_TEXT,
                sequential=options.sequential,
                pipelined=options.pipelined,
                rounds=options.rounds,
            )

    print(
        f"sandbox read of a {len(SMALL_FILE_TEXT.encode())}-byte file; median of "
        f"{options.rounds} rounds of {options.sequential} sequential and {options.pipelined} "
        f"pipelined ({IN_FLIGHT} in flight) requests; Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs" + (f", {NODE_PACKAGE} {node_version}" if node_version else "")
    )
    width = max(len(name) for name in figures)
    print(
        f"{'server':<{width}}  {'sequential/s':>12}  {f'{IN_FLIGHT} in flight/s':>15}"
        f"  {'CPU us/req seq':>14}  {'CPU us/req 16':>13}"
    )
    for name, row in figures.items():
        print(
            f"{name:<{width}}  {row.sequential_rate:>12,.0f}  {row.pipelined_rate:>15,.0f}"
            f"  {row.sequential_cpu_us:>14,.0f}  {row.pipelined_cpu_us:>13,.0f}"
        )

    rows = list(figures.values())
    ours, sdk = rows[0], rows[-1]
    checks = [
        ("sequential >= 4x SDK", ours.sequential_rate / sdk.sequential_rate, 4.0),
        ("pipelined >= 4x SDK", ours.pipelined_rate / sdk.pipelined_rate, 4.0),
    ]
    if not options.no_node:
        typescript = rows[1]
        checks[:0] = [
            ("sequential >= 2x TypeScript", ours.sequential_rate / typescript.sequential_rate, 2.0),
            ("pipelined >= 1x TypeScript", ours.pipelined_rate / typescript.pipelined_rate, 1.0),
        ]
    for label, ratio, target in checks:
        print(f"  {'met ' if ratio >= target else 'MISS'} {label:<28} (x{ratio:.2f})")
    return 0 if all(ratio >= target for _, ratio, target in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
