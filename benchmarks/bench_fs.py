"""Benchmark `sandbox_fs_read` against two other MCP file servers, side by side in one run.

The servers, each reading the same small file through its own read tool:

- this server (`python -m mcp_server_suite`, `sandbox_fs_read`);
- the reference TypeScript server `@modelcontextprotocol/server-filesystem`, pinned to
  `NODE_PACKAGE_VERSION` (its `read_text_file`), run by the Node.js release its package asks
  for (`NODE_RUNTIME`); both are installed from npm into `.cache/bench-node` on first use;
- the MCP SDK's `MCPServer` with a naive read tool (`benchmarks/sdk_fs_server.py`);
- optionally another checkout of this server (`--baseline DIR`, its `src` directory), to
  compare a change with what it changes, memory included.

All are driven by the same raw NDJSON client over pipes (not the SDK client), so the figures
measure the servers. The servers run at once and take turns, round after round, one request at
a time and then with 16 requests in flight, so that a busy moment on the machine weighs on all
of them; the table shows the median of the rounds. Every response is checked to carry exactly
the file's text. Peak RSS is each server's `VmHWM` at the end.

Usage:
    python benchmarks/bench_fs.py [--sequential N] [--pipelined N] [--rounds R] [--no-node]
                                  [--baseline DIR]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndjson_client import NDJSONClient, ServerFailed

__all__ = ["main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE_PREFIX = REPO_ROOT / ".cache" / "bench-node"
NODE_PACKAGE = "@modelcontextprotocol/server-filesystem"
# The reference server's current release, which serves both protocol eras; its package asks
# for Node.js 24 or newer, which npm's `node` package provides.
NODE_PACKAGE_VERSION = "2.0.1"
NODE_RUNTIME = "node@24"
# The MCP SDK the reference server runs on, which its package takes at `^2.3.1`.
NODE_SDK = "@modelcontextprotocol/server"
NODE_ENTRY = NODE_PREFIX / "node_modules" / NODE_PACKAGE / "dist" / "index.js"
NODE_BINARY = NODE_PREFIX / "node_modules" / ".bin" / "node"

# The design document's concurrency default, and the depth the targets are stated at.
IN_FLIGHT = 16

# Warm-up requests before the first round: enough for imports, caches and thread pools.
WARM_UP = 300

# A small text file: a few lines, well under one page.
SMALL_FILE_TEXT = "The quick brown fox jumps over the lazy dog.\n" * 8


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
    """Install the pinned reference server and its Node.js with npm if they are missing."""
    if not (NODE_ENTRY.exists() and NODE_BINARY.exists()):
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is not installed; run with --no-node")
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(NODE_PREFIX),
                f"{NODE_PACKAGE}@{NODE_PACKAGE_VERSION}",
                NODE_RUNTIME,
            ],
            check=True,
        )
    manifest = json.loads((NODE_ENTRY.parents[1] / "package.json").read_text("utf-8"))
    if manifest["version"] != NODE_PACKAGE_VERSION:
        raise SystemExit(f"{NODE_PREFIX} holds {manifest['version']}: remove it to reinstall")
    runtime = subprocess.run(
        [str(NODE_BINARY), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # The install pins neither the package's SDK (a caret range in its manifest) nor the
    # runtime's release within 24 (`node@24`): npm resolves both to the newest at install
    # time, so the output names the ones measured.
    sdk = json.loads((NODE_PREFIX / "node_modules" / NODE_SDK / "package.json").read_text("utf-8"))
    return (
        f"{NODE_PACKAGE} {manifest['version']} ({NODE_SDK} {sdk['version']}) on Node.js {runtime}"
    )


def contenders(data_dir: Path, *, with_node: bool, baseline: Path | None = None) -> list[Contender]:
    """The servers to compare, reading `small.txt` in `data_dir`."""
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    # PYTHONPATH passes through, so another checkout's src/ can be measured with this venv.
    if "PYTHONPATH" in os.environ:
        base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    ours = base_env | {"MCP_SAFE_DATA_DIR": str(data_dir), "MCP_METRICS_ENABLED": "false"}
    servers = [
        Contender(
            name="mcp-server-suite (sandbox_fs_read)",
            command=[sys.executable, "-m", "mcp_server_suite"],
            env=ours,
            tool="sandbox_fs_read",
            arguments={"relative_path": "small.txt"},
            text_of=_structured_content,
        ),
    ]
    if baseline is not None:
        servers.append(
            Contender(
                name=f"baseline ({baseline.parent.name or baseline})",
                command=[sys.executable, "-m", "mcp_server_suite"],
                env=ours | {"PYTHONPATH": str(baseline)},
                tool="sandbox_fs_read",
                arguments={"relative_path": "small.txt"},
                text_of=_structured_content,
            )
        )
    if with_node:
        servers.append(
            Contender(
                name="reference TypeScript server (read_text_file)",
                command=[str(NODE_BINARY), str(NODE_ENTRY), str(data_dir)],
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


@dataclass
class Samples:
    """One server's figures, round after round."""

    sequential: list[float] = field(default_factory=list)
    pipelined: list[float] = field(default_factory=list)
    sequential_cpu_us: list[float] = field(default_factory=list)
    pipelined_cpu_us: list[float] = field(default_factory=list)
    peak_rss_kib: int = 0


def peak_rss_kib(client: NDJSONClient) -> int:
    """The server's VmHWM, in KiB."""
    for line in Path(f"/proc/{client.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise ServerFailed("no VmHWM")


def measure(
    servers: Sequence[Contender], expected: str, *, sequential: int, pipelined: int, rounds: int
) -> dict[str, Samples]:
    """Run the rounds, the servers taking turns within each."""
    clients = {
        server.name: NDJSONClient(server.command, server.env, "bench-fs") for server in servers
    }
    samples = {server.name: Samples() for server in servers}
    try:
        for server in servers:
            client = clients[server.name]
            client.handshake()
            run_pipelined(client, server, WARM_UP, expected)
        for _ in range(rounds):
            for server in servers:
                client = clients[server.name]
                figures = samples[server.name]
                for rates, cpu, run, count in (
                    (figures.sequential, figures.sequential_cpu_us, run_sequential, sequential),
                    (figures.pipelined, figures.pipelined_cpu_us, run_pipelined, pipelined),
                ):
                    cpu_before = client.cpu_seconds()
                    rates.append(run(client, server, count, expected))
                    cpu.append((client.cpu_seconds() - cpu_before) / count * 1e6)
        for server in servers:
            samples[server.name].peak_rss_kib = peak_rss_kib(clients[server.name])
    except ServerFailed as exc:
        stderr = "\n".join(f"{name}:\n{client.stderr()}" for name, client in clients.items())
        raise ServerFailed(f"{exc}\nstderr:\n{stderr}") from None
    finally:
        for client in clients.values():
            client.close()
    return samples


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; the exit status is 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=3000, help="requests per round")
    parser.add_argument("--pipelined", type=int, default=10000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-node", action="store_true", help="skip the TypeScript server")
    parser.add_argument("--baseline", type=Path, help="another checkout's src/ to compare with")
    options = parser.parse_args(argv)

    node = None if options.no_node else ensure_node_server()
    with tempfile.TemporaryDirectory(prefix="bench-fs-") as scratch:
        data_dir = Path(scratch).resolve()
        (data_dir / "small.txt").write_text(SMALL_FILE_TEXT, "utf-8")
        servers = contenders(data_dir, with_node=node is not None, baseline=options.baseline)
        samples = measure(
            servers,
            SMALL_FILE_TEXT,
            sequential=options.sequential,
            pipelined=options.pipelined,
            rounds=options.rounds,
        )

    print(
        f"sandbox read of a {len(SMALL_FILE_TEXT.encode())}-byte file; median of "
        f"{options.rounds} rounds of {options.sequential} sequential and {options.pipelined} "
        f"pipelined ({IN_FLIGHT} in flight) requests, the servers taking turns; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}" + (f"; {node}" if node else "")
    )
    width = max(len(name) for name in samples)
    print(
        f"{'server':<{width}}  {'sequential/s':>12}  {f'{IN_FLIGHT} in flight/s':>15}"
        f"  {'CPU us/req seq':>14}  {'CPU us/req 16':>13}  {'peak RSS MiB':>12}"
    )
    for name, row in samples.items():
        print(
            f"{name:<{width}}  {_median(row.sequential):>12,.0f}  {_median(row.pipelined):>15,.0f}"
            f"  {_median(row.sequential_cpu_us):>14,.0f}  {_median(row.pipelined_cpu_us):>13,.0f}"
            f"  {row.peak_rss_kib / 1024:>12.1f}"
        )

    rows = list(samples.values())
    ours, sdk = rows[0], rows[-1]
    checks = [
        ("sequential >= 4x SDK", _median(ours.sequential) / _median(sdk.sequential), 4.0),
        ("pipelined >= 4x SDK", _median(ours.pipelined) / _median(sdk.pipelined), 4.0),
    ]
    if node is not None:
        typescript = rows[-2]
        checks[:0] = [
            (
                "sequential >= 2x TypeScript",
                _median(ours.sequential) / _median(typescript.sequential),
                2.0,
            ),
            (
                "pipelined >= 1.25x TypeScript",
                _median(ours.pipelined) / _median(typescript.pipelined),
                1.25,
            ),
        ]
    if options.baseline is not None:
        # Lower is better: the ratio to meet is baseline / ours >= 1.
        baseline_kib = rows[1].peak_rss_kib
        print(f"  peak RSS, KiB: {ours.peak_rss_kib:,} here, {baseline_kib:,} in the baseline")
        checks.append(("peak RSS <= baseline", baseline_kib / ours.peak_rss_kib, 1.0))
    for label, ratio, target in checks:
        print(f"  {'met ' if ratio >= target else 'MISS'} {label:<30} (x{ratio:.3f})")
    return 0 if all(ratio >= target for _, ratio, target in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
