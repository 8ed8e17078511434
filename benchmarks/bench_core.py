"""Benchmark the protocol core: start-up, round trips, call throughput and memory, in one run.

MCP clients spawn a stdio server for every session, so start-up is latency a user waits
for, and a desktop runs many such servers at once, so memory counts. Three servers are
measured side by side, each answering the same requests:

- this server, `python -m mcp_server_suite` (no `MCP_SQL_DSN`: the SQL stack is not loaded);
- the MCP SDK's `MCPServer` with an equivalent `system_metrics` (`benchmarks/sdk_server.py`);
- a bare standard-library NDJSON server with canned answers (`benchmarks/echo_server.py`).

Figures, per server:

- cold start: spawn to the `initialize` response, the median of `--runs` fresh processes,
  and then spawn to the first `tools/list` response (what a client waits for before it can
  use the server); and the same for a 2026-07-28 client, in other fresh processes: spawn to
  the `server/discover` response, then to the stateless `tools/list` it sends next
  (the servers take turns, so a noisy moment hits all of them alike);
- sequential pings per second: one request, then its response, then the next;
- pipelined pings per second: a round of 5,000 pings written (by a second thread) while
  the responses are read;
- `tools/call` per second with 1 and with 16 requests in flight (`system_metrics` with a
  1 ms CPU sample, so the calls measure the server rather than the sampling);
- each throughput figure is the median over rounds repeated for at least `--seconds`, taken
  in turns: every server runs at once and each figure is measured on each of them in turn,
  three times, so that a busy moment on the machine weighs on all of them alike;
- peak RSS: the child's `VmHWM` from /proc, read after the workload and before it exits;
- the audit trail's cost: `tools/call` per second and CPU per call of this server with
  `MCP_AUDIT_LOG=off` against the trail on stderr (the default, which the main table
  measures too), in a file, and in a file with the arguments in full, in interleaved rounds,
  with the CPU the trail itself takes inside the server (`audited_server.py`).

Bytecode: a real install (pip, the Nix build) ships compiled `.pyc` files; a development
checkout with `PYTHONDONTWRITEBYTECODE=1` has none, which inflates start-up time and memory
of every Python server here. So the script first compiles this package, the benchmark
servers and the virtual environment's site-packages (`python -m compileall`), and runs the
servers with `PYTHONDONTWRITEBYTECODE` unset.

With `--baseline DIR` (another checkout's `src` directory), that version of this server runs
beside the others in the same turns, for before-and-after figures in one run.

Usage:
    python benchmarks/bench_core.py [--runs N] [--seconds S] [--no-compile]
                                    [--audit-rounds N] [--audit-only] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ndjson_client import NDJSONClient, ServerFailed

__all__ = ["main"]

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
BENCH_DIR: Final = REPO_ROOT / "benchmarks"

PROTOCOL_VERSION: Final = "2025-11-25"

# What every 2026-07-28 request carries in its params' `_meta`.
MODERN_META: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench-core", "version": "1"},
}

# The design document's concurrency default, and the depth the targets are stated at.
IN_FLIGHT: Final = 16

# A 1 ms CPU sample: a call then costs what the server costs, not what the sampling costs.
CPU_SAMPLE_SECONDS: Final = "0.001"

# Throughput figures are the median of at least this many rounds.
MIN_ROUNDS: Final = 3

MIB: Final = 1024 * 1024

# The foundation issue's targets for this server: start-up, pipelined throughput, memory.
COLD_START_MAX_VS_ECHO: Final = 3.0
COLD_START_AIM_VS_ECHO: Final = 2.0
COLD_START_MIN_VS_SDK: Final = 5.0
PIPELINED_PING_MIN_VS_ECHO: Final = 0.5
PEAK_RSS_MAX_MIB: Final = 40.0
# The audit issue's target: recording every call costs under 5% of call throughput.
AUDIT_MAX_COST: Final = 0.05

OURS: Final = "mcp-server-suite"
SDK: Final = "SDK MCPServer"
ECHO: Final = "stdlib echo"


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Figures:
    """What was measured for one server."""

    cold_starts_s: list[float] = field(default_factory=list)
    tool_lists_s: list[float] = field(default_factory=list)
    discovers_s: list[float] = field(default_factory=list)
    modern_tool_lists_s: list[float] = field(default_factory=list)
    rss_after_initialize_kib: int = 0
    sequential_ping_per_s: float = 0.0
    pipelined_ping_per_s: float = 0.0
    calls_per_s: dict[int, float] = field(default_factory=dict)
    peak_rss_kib: int = 0
    libpq_mapped: bool = False

    @property
    def cold_start_s(self) -> float:
        return statistics.median(self.cold_starts_s)


def child_environment() -> dict[str, str]:
    """The servers' environment: minimal, bytecode allowed, a 1 ms CPU sample."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "MCP_METRICS_CPU_SAMPLE_SECONDS": CPU_SAMPLE_SECONDS,
    }
    # Where compiled bytecode lives, when the checkout keeps it outside the source tree.
    if "PYTHONPYCACHEPREFIX" in os.environ:
        env["PYTHONPYCACHEPREFIX"] = os.environ["PYTHONPYCACHEPREFIX"]
    return env


def compile_bytecode(baseline: Path | None = None) -> tuple[float, bool]:
    """Compile what the servers import, as an installed package would ship it.

    Args:
        baseline: Another checkout's `src` directory, compiled too.

    Returns:
        The seconds it took, and whether everything compiled (a read-only store, such as
        Nix's, already holds its bytecode and cannot be written).
    """
    targets = [
        str(REPO_ROOT / "src" / "mcp_server_suite"),
        str(BENCH_DIR),
        sysconfig.get_paths()["purelib"],
        *([] if baseline is None else [str(baseline)]),
    ]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *targets],
        env={**child_environment(), "PYTHONWARNINGS": "ignore"},
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - started, done.returncode == 0


class Child(NDJSONClient):
    """A server process driven over its pipes, with the timings and /proc readings here."""

    def __init__(self, spec: ServerSpec) -> None:
        env = {**child_environment(), **spec.env}
        super().__init__(spec.command, env, "bench-core", PROTOCOL_VERSION)
        self.name = spec.name

    def receive(self) -> dict[str, Any]:
        """The next response; an error response fails the benchmark."""
        message = super().receive()
        if "error" in message:
            raise ServerFailed(f"{self.name} answered an error: {message}")
        return message

    def time_handshake(self) -> float:
        """Initialize; return the seconds from spawn to the `initialize` response."""
        self.handshake()
        return self.initialized_at - self.started

    def list_tools(self) -> float:
        """Ask for the tool list; return the seconds from spawn to its response.

        A client is ready to use a server once it has the tools, so this is the start-up a
        user waits for, whatever the server does after answering `initialize`.
        """
        self.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        response = self.receive()
        elapsed = time.monotonic() - self.started
        if not response.get("result", {}).get("tools"):
            raise ServerFailed(f"{self.name}: unexpected tools/list response {response}")
        return elapsed

    def time_discover(self) -> float:
        """Probe with `server/discover`; return the seconds from spawn to its response."""
        params = {"_meta": MODERN_META}
        self.send({"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": params})
        response = self.receive()
        elapsed = time.monotonic() - self.started
        if "2026-07-28" not in response.get("result", {}).get("supportedVersions", []):
            raise ServerFailed(f"{self.name}: unexpected server/discover response {response}")
        return elapsed

    def list_tools_stateless(self) -> float:
        """A 2026-07-28 `tools/list`; return the seconds from spawn to its response."""
        params = {"_meta": MODERN_META}
        self.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": params})
        response = self.receive()
        elapsed = time.monotonic() - self.started
        if not response.get("result", {}).get("tools"):
            raise ServerFailed(f"{self.name}: unexpected tools/list response {response}")
        return elapsed

    def status_kib(self, field_name: str) -> int:
        """A memory figure of the child from /proc/<pid>/status, in KiB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field_name:
                return int(value.split()[0])
        raise ServerFailed(f"no {field_name} in /proc/{self.process.pid}/status")

    def maps_text(self) -> str:
        return Path(f"/proc/{self.process.pid}/maps").read_text()

    def stderr_lines(self, prefix: str) -> list[str]:
        """Every stderr line so far that starts with `prefix` (the whole of stderr, which
        `stderr()` cuts to its end)."""
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.startswith(prefix)]


def ping(request_id: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % request_id


def call(request_id: int) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "system_metrics", "arguments": {}},
    }
    return json.dumps(message).encode() + b"\n"


def check_call(response: Mapping[str, Any]) -> None:
    result = response.get("result", {})
    if result.get("isError") is not False or "structuredContent" not in result:
        raise ServerFailed(f"unexpected tools/call result: {response}")


def rate(count: int, run: Callable[[int], None], min_seconds: float) -> float:
    """Requests per second: the median over rounds of `count` requests.

    Rounds repeat until `min_seconds` have passed and at least `MIN_ROUNDS` have run, so a
    fast server is measured as long as a slow one and one noisy moment moves the median
    little.
    """
    rates: list[float] = []
    first_id = 1
    started = time.perf_counter()
    while len(rates) < MIN_ROUNDS or time.perf_counter() - started < min_seconds:
        round_started = time.perf_counter()
        run(first_id)
        rates.append(count / (time.perf_counter() - round_started))
        first_id += count
    return statistics.median(rates)


def sequential_pings(child: Child, count: int, min_seconds: float = 0.0) -> float:
    def run(first_id: int) -> None:
        for request_id in range(first_id, first_id + count):
            child.write(ping(request_id))
            if child.receive()["id"] != request_id:
                raise ServerFailed("out-of-order ping")

    return rate(count, run, min_seconds)


def pipelined_pings(child: Child, count: int, min_seconds: float = 0.0) -> float:
    def run(first_id: int) -> None:
        # A writer thread keeps the server's input full while this thread reads.
        ids = range(first_id, first_id + count)
        data = b"".join(ping(request_id) for request_id in ids)
        writer = threading.Thread(target=child.write, args=(data,), name="bench-writer")
        writer.start()
        for request_id in ids:
            if child.receive()["id"] != request_id:
                raise ServerFailed("out-of-order ping")
        writer.join()

    return rate(count, run, min_seconds)


def calls_in_flight(child: Child, count: int, depth: int, min_seconds: float = 0.0) -> float:
    def run(first_id: int) -> None:
        last_id = first_id + count - 1
        next_id = first_id
        while next_id <= min(first_id + depth - 1, last_id):
            child.write(call(next_id))
            next_id += 1
        for _ in range(count):
            check_call(child.receive())
            if next_id <= last_id:
                child.write(call(next_id))
                next_id += 1

    return rate(count, run, min_seconds)


def measure_cold_starts(specs: Sequence[ServerSpec], runs: int) -> dict[str, Figures]:
    figures = {spec.name: Figures() for spec in specs}
    for _ in range(runs):
        for spec in specs:  # in turns, so that noise is shared
            child = Child(spec)
            try:
                figures[spec.name].cold_starts_s.append(child.time_handshake())
                figures[spec.name].tool_lists_s.append(child.list_tools())
            finally:
                child.close()
            modern = Child(spec)
            try:
                figures[spec.name].discovers_s.append(modern.time_discover())
                figures[spec.name].modern_tool_lists_s.append(modern.list_tools_stateless())
            finally:
                modern.close()
    return figures


# The warm figures are taken in this many turns, every server measured in each turn, so that a
# moment when the machine is busy weighs on all of them alike (each figure is the median).
WARM_TURNS: Final = 3


def measure_warm(
    specs: Sequence[ServerSpec], figures: Mapping[str, Figures], seconds: float
) -> None:
    children = {spec.name: Child(spec) for spec in specs}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"sequential": [], "pipelined": [], "1": [], "16": []} for name in children
    }
    share = seconds / WARM_TURNS
    try:
        for name, child in children.items():
            child.time_handshake()
            time.sleep(0.2)  # let start-up work settle before the first reading
            figures[name].rss_after_initialize_kib = child.status_kib("VmRSS")
            # Warm-up: imports on first use, caches, the worker threads.
            sequential_pings(child, 200)
            calls_in_flight(child, 4 * IN_FLIGHT, IN_FLIGHT)
        for turn in range(WARM_TURNS):
            order = list(children.items())
            if turn % 2:
                order.reverse()
            for name, child in order:
                samples[name]["sequential"].append(sequential_pings(child, 500, share))
            for name, child in order:
                samples[name]["pipelined"].append(pipelined_pings(child, 5_000, share))
            for name, child in order:
                samples[name]["1"].append(calls_in_flight(child, 100, 1, share))
            for name, child in order:
                samples[name]["16"].append(calls_in_flight(child, 500, IN_FLIGHT, share))
        for name, child in children.items():
            taken = samples[name]
            figures[name].sequential_ping_per_s = statistics.median(taken["sequential"])
            figures[name].pipelined_ping_per_s = statistics.median(taken["pipelined"])
            figures[name].calls_per_s[1] = statistics.median(taken["1"])
            figures[name].calls_per_s[IN_FLIGHT] = statistics.median(taken["16"])
            figures[name].peak_rss_kib = child.status_kib("VmHWM")
            figures[name].libpq_mapped = "libpq" in child.maps_text()
    finally:
        for child in children.values():
            child.close()


def spread_ms(samples: Sequence[float]) -> str:
    return f"{min(samples) * 1000:.0f}-{max(samples) * 1000:.0f}"


def format_table(specs: Sequence[ServerSpec], figures: Mapping[str, Figures]) -> str:
    names = [spec.name for spec in specs]
    rows: list[tuple[str, list[str]]] = [
        ("cold start, median (ms)", [f"{figures[n].cold_start_s * 1000:.0f}" for n in names]),
        (
            "cold start, min-max (ms)",
            [spread_ms(figures[n].cold_starts_s) for n in names],
        ),
        (
            "spawn to tools/list, median (ms)",
            [f"{statistics.median(figures[n].tool_lists_s) * 1000:.0f}" for n in names],
        ),
        (
            "spawn to server/discover, median (ms)",
            [f"{statistics.median(figures[n].discovers_s) * 1000:.0f}" for n in names],
        ),
        (
            "spawn to stateless tools/list (ms)",
            [f"{statistics.median(figures[n].modern_tool_lists_s) * 1000:.0f}" for n in names],
        ),
        ("ping/s, sequential", [f"{figures[n].sequential_ping_per_s:,.0f}" for n in names]),
        ("ping/s, pipelined", [f"{figures[n].pipelined_ping_per_s:,.0f}" for n in names]),
        ("tools/call/s, 1 in flight", [f"{figures[n].calls_per_s[1]:,.0f}" for n in names]),
        (
            f"tools/call/s, {IN_FLIGHT} in flight",
            [f"{figures[n].calls_per_s[IN_FLIGHT]:,.0f}" for n in names],
        ),
        (
            "RSS after initialize (MiB)",
            [f"{figures[n].rss_after_initialize_kib / 1024:.1f}" for n in names],
        ),
        ("peak RSS, VmHWM (MiB)", [f"{figures[n].peak_rss_kib / 1024:.1f}" for n in names]),
    ]
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(name), *(len(cells[i]) for _, cells in rows)) for i, name in enumerate(names)]
    header = " | ".join(
        [" " * label_width, *(name.rjust(width) for name, width in zip(names, widths, strict=True))]
    )
    lines = [header, "-" * len(header)]
    for label, cells in rows:
        padded = (cell.rjust(width) for cell, width in zip(cells, widths, strict=True))
        lines.append(" | ".join([label.ljust(label_width), *padded]))
    return "\n".join(lines)


def format_targets(figures: Mapping[str, Figures]) -> tuple[str, bool]:
    ours, sdk, echo = figures[OURS], figures[SDK], figures[ECHO]
    start_vs_echo = ours.cold_start_s / echo.cold_start_s
    sdk_vs_start = sdk.cold_start_s / ours.cold_start_s
    discover_vs_echo = statistics.median(ours.discovers_s) / statistics.median(echo.discovers_s)
    pipelined_vs_echo = ours.pipelined_ping_per_s / echo.pipelined_ping_per_s
    peak_mib = ours.peak_rss_kib / 1024
    checks = [
        (
            f"cold start <= {COLD_START_MAX_VS_ECHO:g}x the echo server's "
            f"(aim {COLD_START_AIM_VS_ECHO:g}x)",
            f"{start_vs_echo:.2f}x",
            start_vs_echo <= COLD_START_MAX_VS_ECHO,
        ),
        (
            f"spawn to server/discover <= {COLD_START_MAX_VS_ECHO:g}x the echo server's",
            f"{discover_vs_echo:.2f}x",
            discover_vs_echo <= COLD_START_MAX_VS_ECHO,
        ),
        (
            f"cold start >= {COLD_START_MIN_VS_SDK:g}x faster than the SDK's",
            f"{sdk_vs_start:.1f}x faster",
            sdk_vs_start >= COLD_START_MIN_VS_SDK,
        ),
        (
            f"pipelined ping >= {PIPELINED_PING_MIN_VS_ECHO:g}x the echo server's rate",
            f"{pipelined_vs_echo:.2f}x",
            pipelined_vs_echo >= PIPELINED_PING_MIN_VS_ECHO,
        ),
        (
            f"peak RSS < {PEAK_RSS_MAX_MIB:g} MiB without the SQL stack",
            f"{peak_mib:.1f} MiB" + (" (libpq mapped!)" if ours.libpq_mapped else ""),
            peak_mib < PEAK_RSS_MAX_MIB and not ours.libpq_mapped,
        ),
    ]
    width = max(len(name) for name, _, _ in checks)
    lines = [f"targets for {OURS}:"]
    for name, value, met in checks:
        lines.append(f"  {name.ljust(width)}  {value:>16}  {'met' if met else 'MISSED'}")
    if start_vs_echo > COLD_START_AIM_VS_ECHO:
        lines.append(f"  (cold start is above the {COLD_START_AIM_VS_ECHO:g}x mark aimed for)")
    return "\n".join(lines), all(met for _, _, met in checks)


def audited_calls(child: Child, count: int, depth: int) -> tuple[float, float]:
    """Calls per second (median of `MIN_ROUNDS` rounds of `count`) and the server's CPU
    microseconds per call over all of them.

    CPU time per call is the steadier figure on a busy machine: other processes stretch the
    wall clock of a round, not the CPU the server spends on it.
    """
    cpu_before = child.cpu_seconds()
    per_second = calls_in_flight(child, count, depth)
    cpu_us = (child.cpu_seconds() - cpu_before) / (MIN_ROUNDS * count) * 1e6
    return per_second, cpu_us


def audit_cpu_ns(child: Child) -> tuple[int, int]:
    """The running totals of an `audited_server.py` child: trail CPU (ns) and records."""
    seen = len(child.stderr_lines("AUDIT-CPU "))
    child.process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = child.stderr_lines("AUDIT-CPU ")
        if len(lines) > seen:
            spent, records = lines[-1].split()[1:]
            return int(spent), int(records)
        time.sleep(0.01)
    raise ServerFailed(f"{child.name}: no AUDIT-CPU line on stderr")


def measure_audit(python: str, rounds: int) -> str:
    """The audit trail's cost: call throughput and server CPU per call with the trail off and
    on, in interleaved rounds, and the CPU the trail itself takes inside the server.

    Every variant runs `audited_server.py`, which adds up the thread CPU time the trail takes;
    with the trail off that is the measurement's own cost, subtracted from the others. The
    trail's share of a call is its CPU per record over the server's CPU per call with the
    trail off, at each depth.

    Returns:
        The table and the target line.
    """
    command = (python, str(BENCH_DIR / "audited_server.py"))
    depths = (1, IN_FLIGHT)
    counts = {1: 300, IN_FLIGHT: 1000}
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as scratch:
        log = str(Path(scratch) / "audit.jsonl")
        variants = [
            ("off", {"MCP_AUDIT_LOG": "off"}),
            ("stderr (default)", {}),
            ("file", {"MCP_AUDIT_LOG": log}),
            ("file, full arguments", {"MCP_AUDIT_LOG": log, "MCP_AUDIT_ARGUMENTS": "full"}),
        ]
        names = [name for name, _ in variants]
        rates = {name: {depth: list[float]() for depth in depths} for name in names}
        cpu = {name: {depth: list[float]() for depth in depths} for name in names}
        trail = {name: {depth: list[float]() for depth in depths} for name in names}
        for _ in range(rounds):
            for name, env in variants:  # in turns, so that noise is shared
                child = Child(ServerSpec(name, command, env))
                try:
                    child.time_handshake()
                    calls_in_flight(child, 4 * IN_FLIGHT, IN_FLIGHT)  # warm-up
                    for depth in depths:
                        spent_before, records_before = audit_cpu_ns(child)
                        per_second, cpu_us = audited_calls(child, counts[depth], depth)
                        spent, records = audit_cpu_ns(child)
                        rates[name][depth].append(per_second)
                        cpu[name][depth].append(cpu_us)
                        calls = max(1, records - records_before)
                        trail[name][depth].append((spent - spent_before) / calls / 1000)
                finally:
                    child.close()

    def median(table: dict[str, dict[int, list[float]]], name: str, depth: int) -> float:
        return statistics.median(table[name][depth])

    lines = [
        f"audit trail, {OURS} (medians of {rounds} interleaved rounds; CPU is the server's):",
        f"  {'MCP_AUDIT_LOG':<22} {'calls/s':>15} {'CPU us/call':>13} "
        f"{'trail us/call':>15} {'of CPU':>13} {'of time':>13}",
        f"  {'':<22} "
        + " ".join(f"{f'1 / {IN_FLIGHT}':>{width}}" for width in (15, 13, 15, 13, 13)),
    ]
    worst = 0.0
    for name in names:
        inside = [max(0.0, median(trail, name, d) - median(trail, "off", d)) for d in depths]
        of_cpu = [inside[i] / median(cpu, "off", d) for i, d in enumerate(depths)]
        # The trail's busy time per second of serving: the most it can take from throughput.
        of_time = [inside[i] * median(rates, name, d) / 1e6 for i, d in enumerate(depths)]
        if name in ("stderr (default)", "file"):
            worst = max(worst, *of_time)
        lines.append(
            f"  {name:<22} "
            f"{' / '.join(f'{median(rates, name, d):,.0f}' for d in depths):>15} "
            f"{' / '.join(f'{median(cpu, name, d):,.0f}' for d in depths):>13} "
            f"{' / '.join(f'{value:.1f}' for value in inside):>15} "
            f"{' / '.join(f'{value:.1%}' for value in of_cpu):>13} "
            f"{' / '.join(f'{value:.1%}' for value in of_time):>13}"
        )
    met = worst < AUDIT_MAX_COST
    lines.append(
        f"  target: with its arguments as a digest, the trail takes < {AUDIT_MAX_COST:.0%} of call "
        f"throughput (its CPU per call times calls per second: the share of the server's time it "
        f"is busy): worst {worst:.1%}, {'met' if met else 'MISSED'}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; the status is 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=9, help="cold starts per server")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="least time spent on each throughput figure"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip compiling bytecode first")
    parser.add_argument(
        "--audit-rounds", type=int, default=3, help="interleaved rounds of the audit comparison"
    )
    parser.add_argument(
        "--audit-only", action="store_true", help="measure only the audit trail's cost"
    )
    parser.add_argument("--baseline", type=Path, help="another checkout's src/ to compare with")
    options = parser.parse_args(argv)

    python = sys.executable
    specs = [
        ServerSpec(OURS, (python, "-m", "mcp_server_suite")),
        ServerSpec(SDK, (python, str(BENCH_DIR / "sdk_server.py"))),
        ServerSpec(ECHO, (python, str(BENCH_DIR / "echo_server.py"))),
    ]
    if options.baseline is not None:
        baseline = options.baseline.resolve()
        specs.append(
            ServerSpec(
                f"baseline ({baseline.parent.name or baseline})",
                (python, "-m", "mcp_server_suite"),
                {"PYTHONPATH": str(baseline)},
            )
        )
    print(
        f"python {platform.python_version()} ({python}), {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if options.no_compile:
        print("bytecode: not compiled (--no-compile); figures include compiling on import")
    else:
        seconds, complete = compile_bytecode(options.baseline)
        print(
            f"bytecode: compiled the package, the benchmark servers and site-packages "
            f"({seconds:.1f} s{'' if complete else ', some files could not be written'}); "
            "servers run with PYTHONDONTWRITEBYTECODE unset"
        )
    print(f"tools/call: system_metrics with a {CPU_SAMPLE_SECONDS} s CPU sample in every server")
    print()

    audit = measure_audit(python, options.audit_rounds)
    if options.audit_only:
        print(audit)
        return 0 if audit.endswith(" met") else 1

    figures = measure_cold_starts(specs, options.runs)
    measure_warm(specs, figures, options.seconds)

    print(format_table(specs, figures))
    print()
    summary, all_met = format_targets(figures)
    print(summary)
    print()
    print(audit)
    return 0 if all_met and audit.endswith(" met") else 1


if __name__ == "__main__":
    sys.exit(main())
