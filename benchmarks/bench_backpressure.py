"""Stress the output bound: a client that stops reading while large results complete.

The scenario of the protocol issue: a client writes 80 `tools/call` reads of a 1 MiB file of
NUL bytes in one go, then reads nothing for a while. Each result is a 13 MiB response (every
NUL byte is `\\u0000` in the structured result and `\\\\u0000` in the text block beside it)
unless the tool cuts it (this server's read tool cuts each at 4 MiB), so a server that keeps
what it cannot write holds up to a gigabyte. Then the client reads everything, and pings:
the server must answer again as soon as it is read.

The servers, side by side, each with its own read tool on the same file:

- this server (`python -m mcp_server_suite`, `sandbox_fs_read`, `max_bytes` 1,048,576);
- the MCP SDK's `MCPServer` with a naive read tool (`benchmarks/sdk_fs_server.py`);
- the reference TypeScript server `@modelcontextprotocol/server-filesystem`
  (`read_text_file`), the release and Node.js that `bench_fs.py` pins, from
  `.cache/bench-node` (installed on first use; `--no-node` skips it).

Figures, per server: the peak RSS while the client does not read, and overall (`VmHWM`), how
many calls were answered with their result and how many with an in-band refusal, how long
the client took to read everything, how soon the first response came once it read, and
whether a ping sent afterwards was answered. The target for this server: every call
answered, a peak under 128 MiB, and the ping answered.

Usage:
    python benchmarks/bench_backpressure.py [--calls N] [--size BYTES] [--stall SECONDS]
        [--no-node] [--no-sdk]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_fs import NODE_BINARY, NODE_ENTRY, ensure_node_server
from ndjson_client import NDJSONClient, ServerFailed

__all__ = ["main"]

REPO_ROOT = Path(__file__).resolve().parents[1]

MIB = 1024 * 1024

# The figures: 80 pipelined reads of 1 MiB, and a session allowed 128 MiB.
DEFAULT_CALLS = 80
DEFAULT_SIZE = MIB
PEAK_RSS_TARGET_MIB = 128.0

# How often the memory of a stalled server is sampled.
SAMPLE_EVERY_S = 0.05

# What one response may take before the benchmark gives up on a server.
READ_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Contender:
    """One server under test and how to ask it for the file."""

    name: str
    command: Sequence[str]
    env: Mapping[str, str]
    tool: str
    arguments: Mapping[str, Any]


@dataclass
class Figures:
    """What one server did."""

    stalled_peak_mib: float = 0.0
    overall_peak_mib: float = 0.0
    answered: int = 0
    refused: int = 0
    drain_s: float = 0.0
    first_answer_ms: float = 0.0
    ping_answered: bool = False
    refusals: dict[str, int] = field(default_factory=dict)
    failure: str | None = None


def status_mib(pid: int, name: str) -> float:
    """A memory figure of a process from /proc/<pid>/status, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return int(value.split()[0]) / 1024
    raise ServerFailed(f"no {name} in /proc/{pid}/status")


def contenders(data_dir: Path, size: int, *, with_sdk: bool, with_node: bool) -> list[Contender]:
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if "PYTHONPATH" in os.environ:
        base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    servers = [
        Contender(
            "mcp-server-suite (sandbox_fs_read)",
            [sys.executable, "-m", "mcp_server_suite"],
            base_env | {"MCP_SAFE_DATA_DIR": str(data_dir), "MCP_METRICS_ENABLED": "false"},
            "sandbox_fs_read",
            {"relative_path": "nul.txt", "max_bytes": size},
        )
    ]
    if with_sdk:
        servers.append(
            Contender(
                "SDK MCPServer, naive tool (read_text_file)",
                [sys.executable, str(REPO_ROOT / "benchmarks" / "sdk_fs_server.py")],
                base_env | {"BENCH_ROOT": str(data_dir)},
                "read_text_file",
                {"path": "nul.txt"},
            )
        )
    if with_node:
        servers.append(
            Contender(
                "reference TypeScript server (read_text_file)",
                [str(NODE_BINARY), str(NODE_ENTRY), str(data_dir)],
                base_env,
                "read_text_file",
                {"path": str(data_dir / "nul.txt")},
            )
        )
    return servers


def _sample_peak(pid: int, until: float, figures: Figures) -> None:
    while time.monotonic() < until:
        figures.stalled_peak_mib = max(figures.stalled_peak_mib, status_mib(pid, "VmHWM"))
        time.sleep(SAMPLE_EVERY_S)


def _classify(reply: dict[str, Any], figures: Figures) -> None:
    result = reply.get("result")
    if result is None:
        raise ServerFailed(f"an error instead of a result: {json.dumps(reply)[:300]}")
    if not result.get("isError"):
        figures.answered += 1
        return
    figures.refused += 1
    text = result["content"][0]["text"]
    try:
        reason = str(json.loads(text).get("detail", text))
    except ValueError:
        reason = text
    figures.refusals[reason[:72]] = figures.refusals.get(reason[:72], 0) + 1


def measure(contender: Contender, calls: int, stall: float) -> Figures:
    """Run the scenario against one server; a server that dies is a result too."""
    client = NDJSONClient(contender.command, contender.env, "bench-backpressure")
    figures = Figures()
    pid = client.process.pid
    try:
        client.handshake()
        requests = b"".join(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": contender.tool, "arguments": dict(contender.arguments)},
                }
            ).encode()
            + b"\n"
            for request_id in range(calls)
        )
        # A writer thread: a server that stops reading its input must not stall this script.
        writer = threading.Thread(target=_write_quietly, args=(client, requests), daemon=True)
        writer.start()
        _sample_peak(pid, time.monotonic() + stall, figures)
        started = time.monotonic()
        _classify(client.receive(), figures)
        figures.first_answer_ms = (time.monotonic() - started) * 1000
        for _ in range(calls - 1):
            _classify(client.receive(), figures)
            figures.overall_peak_mib = max(figures.overall_peak_mib, status_mib(pid, "VmHWM"))
        figures.drain_s = time.monotonic() - started
        writer.join(READ_TIMEOUT_S)
        client.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        figures.ping_answered = client.receive().get("id") == "ping"
        figures.overall_peak_mib = max(figures.overall_peak_mib, status_mib(pid, "VmHWM"))
    except (ServerFailed, OSError) as exc:
        # The last line the server wrote to stderr says best what went wrong.
        lines = [line for line in client.stderr().splitlines() if line.strip()]
        figures.failure = f"{type(exc).__name__}; stderr: {lines[-1] if lines else '-'}"[:120]
    finally:
        figures.overall_peak_mib = max(figures.overall_peak_mib, figures.stalled_peak_mib)
        client.close()
    return figures


def _write_quietly(client: NDJSONClient, data: bytes) -> None:
    # A server that dies mid-write ends the write; the benchmark reports the death.
    with contextlib.suppress(OSError):
        client.write(data)


def _row(name: str, figures: Figures, calls: int) -> str:
    if figures.failure is not None:
        return (
            f"{name:<46} {figures.stalled_peak_mib:>9.1f} {figures.overall_peak_mib:>9.1f} "
            f"died after {figures.answered + figures.refused} answers ({figures.failure})"
        )
    return (
        f"{name:<46} {figures.stalled_peak_mib:>9.1f} {figures.overall_peak_mib:>9.1f} "
        f"{figures.answered:>5}/{calls:<3} {figures.refused:>7} {figures.first_answer_ms:>9.0f} "
        f"{figures.drain_s:>8.1f} {'yes' if figures.ping_answered else 'NO':>5}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scenario against each server; the exit status is 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="reads sent at once")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="bytes of NUL in the file")
    parser.add_argument("--stall", type=float, default=3.0, help="seconds the client reads nothing")
    parser.add_argument("--no-sdk", action="store_true", help="skip the SDK server")
    parser.add_argument("--no-node", action="store_true", help="skip the TypeScript server")
    options = parser.parse_args(argv)

    node_version = None if options.no_node else ensure_node_server()
    load = os.getloadavg()[0]
    results: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="bench-backpressure-") as scratch:
        data_dir = Path(scratch).resolve()
        (data_dir / "nul.txt").write_bytes(b"\0" * options.size)
        servers = contenders(
            data_dir, options.size, with_sdk=not options.no_sdk, with_node=not options.no_node
        )
        for contender in servers:
            results[contender.name] = measure(contender, options.calls, options.stall)

    print(
        f"{options.calls} reads of a {options.size:,}-byte file of NUL bytes written at once, "
        f"no reading for {options.stall:g} s, then everything read and a ping; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}"
        + (f", {node_version}" if node_version else "")
    )
    print(
        f"{'server':<46} {'stalled':>9} {'peak':>9} {'results':>9} {'refused':>7} "
        f"{'first ms':>9} {'drain s':>8} {'ping':>5}"
    )
    print(f"{'':<46} {'RSS MiB':>9} {'RSS MiB':>9}")
    for name, figures in results.items():
        print(_row(name, figures, options.calls))
        for reason, count in sorted(figures.refusals.items()):
            print(f"{'':<8}{count:>4} refused: {reason}")

    ours = next(iter(results.values()))
    checks: list[tuple[str, Callable[[], bool]]] = [
        (
            f"peak RSS under {PEAK_RSS_TARGET_MIB:g} MiB",
            lambda: ours.overall_peak_mib < PEAK_RSS_TARGET_MIB,
        ),
        (
            "every call answered",
            lambda: ours.failure is None and ours.answered + ours.refused == options.calls,
        ),
        ("the session answers again once read", lambda: ours.ping_answered),
    ]
    print("targets for mcp-server-suite:")
    met = True
    for label, check in checks:
        ok = check()
        met = met and ok
        print(f"  {'met ' if ok else 'MISS'} {label}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
