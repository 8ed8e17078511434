"""Benchmark `read_only_sql`: the policy's cost per query, and calls per second end to end.

Part 1, the policy alone: parse with PostgreSQL's parser, check the tree, qualify the
relations, wrap and parse again to prove the result, for a short and a long query, many
times; the median and 99th percentile in microseconds, with one parse alone shown for scale.

Part 2, end to end, side by side in one run against the same throwaway PostgreSQL (started by
`tests/support/postgres.py`'s launcher on a Unix socket), on a 50-row query:

- this server (`python -m mcp_server_suite`, `read_only_sql`, every control in place);
- the MCP SDK's `MCPServer` with a naive SQL tool (`benchmarks/sdk_sql_server.py`);
- `postgres-mcp` from PyPI in restricted mode (`execute_sql`), installed on first use into
  `.cache/bench-venvs/postgres-mcp` with a Python of 3.12 or newer (it requires one): the
  first of `BENCH_POSTGRES_MCP_PYTHON`, `python3.13`, `python3.12`, or a pyenv version.

All servers are driven by the same raw NDJSON client over pipes, one request at a time and
then with 16 in flight, after a warm-up; every response is checked to hold 50 rows. The
servers run side by side and take turns, round after round, so that a busy moment on the
machine weighs on all of them; the table shows the median of the rounds. Each table is
measured twice: with the same query text on every call, and with a different literal in
every call (`id > -N`, which keeps the same 50 rows), so that no server can reuse what it
worked out for an earlier text. (This server still reuses its policy's verdict for the
query's shape, the same tree but for its constants; a shape never seen costs it about 85 µs
more, the figure of part 1.)

PostgreSQL runs with its default of logging no statements (`--log-statements` logs them all,
as the test suite's server does, which weighs on each server by the number of statements it
sends).

Usage:
    python benchmarks/bench_sql.py [--rounds R] [--calls N] [--no-postgres-mcp]
        [--log-statements] [--baseline TREE]

`--baseline TREE` adds this server as an earlier commit built it (a tree written by
`git archive COMMIT src | tar -x -C TREE`), run from that tree's `src`, to the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndjson_client import NDJSONClient, ServerFailed

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psycopg  # noqa: E402

from tests.support.postgres import start_postgres, stop_postgres  # noqa: E402

__all__ = ["main"]

POSTGRES_MCP_VENV = REPO_ROOT / ".cache" / "bench-venvs" / "postgres-mcp"
POSTGRES_MCP_VERSION = "0.3.0"
POSTGRES_MCP_DEPENDENCIES = (
    "attrs>=25.3.0",
    "humanize>=4.8.0",
    "instructor>=1.7.9",
    "mcp[cli]>=1.5.0,<2",
    "pglast>=7.2,<8",
    "psycopg-pool>=3.2.6",
    "psycopg[binary]>=3.2.6",
)
POSTGRES_MCP_BIN = POSTGRES_MCP_VENV / "bin" / "postgres-mcp"

# The design document's concurrency default, and the depth the targets are stated at.
IN_FLIGHT = 16
# Calls before each measurement: imports, pools, caches and plans warm up.
WARM_UP = 200
# What one call may take before the benchmark gives up on a server.
CALL_TIMEOUT_S = 30.0

# The end-to-end query: 50 rows of three columns from the fixture table.
QUERY = "SELECT id, name, secret FROM t WHERE id <= 50 ORDER BY id"
ROWS = 50

SHORT_QUERY = "SELECT id, name FROM t WHERE id > 10 ORDER BY id LIMIT 20"
# Built from constants: a long query for the policy to parse.
LONG_QUERY = (
    "SELECT "  # noqa: S608
    + ", ".join(f"coalesce(t.name, lower(t.secret)) || '{i}' AS a{i}" for i in range(40))
    + " FROM t JOIN v ON v.id = t.id WHERE t.id IN (SELECT id FROM t WHERE starts_with(name, 'n')) "
    "GROUP BY t.id, t.name, t.secret ORDER BY t.id LIMIT 10"
)


@dataclass(frozen=True)
class Contender:
    """One server under test and how to ask it for the rows."""

    name: str
    command: Sequence[str]
    env: Mapping[str, str]
    tool: str
    argument: str
    row_count: Callable[[dict[str, Any]], int]


def _structured_rows(result: dict[str, Any]) -> int:
    return len(result["structuredContent"]["rows"])


def _sdk_rows(result: dict[str, Any]) -> int:
    structured = result.get("structuredContent")
    if structured is not None:
        return len(structured["rows"])
    return len(json.loads(result["content"][0]["text"])["rows"])


def _postgres_mcp_rows(result: dict[str, Any]) -> int:
    # postgres-mcp answers with the rows as the text of a Python list of dicts.
    text: str = result["content"][0]["text"]
    return text.count("'id':")


def _request(contender: Contender, request_id: int, *, distinct: bool) -> dict[str, Any]:
    # Distinct calls differ by a literal that keeps the same 50 rows. A comment would not do:
    # a server that regenerates SQL from the parsed tree drops comments, and could then reuse
    # what it worked out for an earlier text.
    query = QUERY.replace(" ORDER BY", f" AND id > -{request_id} ORDER BY") if distinct else QUERY
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": contender.tool, "arguments": {contender.argument: query}},
    }


def _check(contender: Contender, reply: dict[str, Any]) -> None:
    result = reply.get("result")
    if result is None or result.get("isError"):
        raise ServerFailed(f"{contender.name}: {json.dumps(reply)[:500]}")
    if contender.row_count(result) != ROWS:
        raise ServerFailed(f"{contender.name}: not {ROWS} rows: {json.dumps(result)[:300]}")


def run_calls(
    client: NDJSONClient, contender: Contender, count: int, depth: int, *, distinct: bool
) -> float:
    """Keep `depth` calls outstanding until `count` are answered; return calls per second."""
    started = time.perf_counter()
    sent = 0
    first = client.next_id
    client.next_id += count
    while sent < min(depth, count):
        client.send(_request(contender, first + sent, distinct=distinct))
        sent += 1
    for _ in range(count):
        _check(contender, client.receive())
        if sent < count:
            client.send(_request(contender, first + sent, distinct=distinct))
            sent += 1
    return count / (time.perf_counter() - started)


@dataclass(frozen=True)
class Figures:
    """One server's medians: calls per second and server CPU microseconds per call."""

    sequential_rate: float
    pipelined_rate: float
    sequential_cpu_us: float
    pipelined_cpu_us: float


class Session:
    """One running server under test, and its samples for one table."""

    def __init__(self, contender: Contender, *, distinct: bool) -> None:
        self.contender = contender
        self.distinct = distinct
        self.client = NDJSONClient(contender.command, contender.env, "bench-sql")
        self.samples: dict[str, list[float]] = {
            "seq": [],
            "pipe": [],
            "seq_cpu": [],
            "pipe_cpu": [],
        }

    def start(self) -> None:
        """Initialize the session and warm the server up."""
        self.client.handshake()
        run_calls(self.client, self.contender, WARM_UP, IN_FLIGHT, distinct=self.distinct)

    def round(self, calls: int) -> None:
        """Measure `calls` calls one at a time, then `calls` with `IN_FLIGHT` in flight."""
        for mode, depth in (("seq", 1), ("pipe", IN_FLIGHT)):
            cpu_before = self.client.cpu_seconds()
            rate = run_calls(self.client, self.contender, calls, depth, distinct=self.distinct)
            self.samples[mode].append(rate)
            self.samples[f"{mode}_cpu"].append(
                (self.client.cpu_seconds() - cpu_before) / calls * 1e6
            )

    def figures(self) -> Figures:
        """The medians of the rounds so far."""
        medians = {key: statistics.median(values) for key, values in self.samples.items()}
        return Figures(medians["seq"], medians["pipe"], medians["seq_cpu"], medians["pipe_cpu"])

    def failed(self, exc: ServerFailed) -> ServerFailed:
        """Add the server's standard error to a failure."""
        return ServerFailed(f"{exc}\nstderr:\n{self.client.stderr()}")


def measure(
    servers: Sequence[Contender], *, calls: int, rounds: int, distinct: bool
) -> dict[str, Figures]:
    """Median figures over `rounds` rounds in which the servers take turns."""
    sessions = [Session(contender, distinct=distinct) for contender in servers]
    current = sessions[0]
    try:
        for current in sessions:
            current.start()
        for _ in range(rounds):
            for current in sessions:
                slow = current.contender.tool == "execute_sql"
                # postgres-mcp is slower by an order of magnitude.
                current.round(max(calls // 10, 100) if slow else calls)
    except ServerFailed as exc:
        raise current.failed(exc) from None
    finally:
        for session in sessions:
            session.client.close()
    return {session.contender.name: session.figures() for session in sessions}


def policy_cost(iterations: int) -> list[tuple[str, int, float, float, float]]:
    """Microseconds per query for the whole policy and for one parse alone."""
    from mcp_server_suite.tools.sql.policy import FunctionPolicy, parse_tree_json
    from mcp_server_suite.tools.sql.statement import RelationCatalog, render_statement
    from mcp_server_suite.tools.sql.tool import check_untrusted_sql

    functions = FunctionPolicy()
    catalog = RelationCatalog(("public",), [("public", "t"), ("public", "private")])

    def whole_policy(text: str) -> None:
        checked = check_untrusted_sql(text, functions=functions, schemas=catalog.schemas)
        render_statement(checked, catalog, max_rows=50, max_result_bytes=1_048_576)

    rows = []
    for label, text in (("short", SHORT_QUERY), ("long", LONG_QUERY)):
        count = iterations if label == "short" else max(iterations // 20, 50)
        for _ in range(min(count, 50)):
            whole_policy(text)
        whole: list[float] = []
        parse: list[float] = []
        for _ in range(count):
            started = time.perf_counter_ns()
            whole_policy(text)
            whole.append((time.perf_counter_ns() - started) / 1000)
            started = time.perf_counter_ns()
            parse_tree_json(text)
            parse.append((time.perf_counter_ns() - started) / 1000)
        whole.sort()
        rows.append(
            (
                label,
                len(text),
                statistics.median(whole),
                whole[int(len(whole) * 0.99) - 1],
                statistics.median(parse),
            )
        )
    return rows


def _python_for_postgres_mcp() -> str | None:
    configured = os.environ.get("BENCH_POSTGRES_MCP_PYTHON")
    if configured:
        return configured
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)
        if (
            found
            and subprocess.run([found, "-V"], capture_output=True, check=False).returncode == 0
        ):
            return found
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        versions = sorted(Path(root.stdout.strip()).glob("versions/3.1[2-9]*/bin/python"))
        if versions:
            return str(versions[-1])
    return None


def ensure_postgres_mcp() -> str:
    """Install postgres-mcp into its own venv if it is missing; return its version."""
    if not POSTGRES_MCP_BIN.exists():
        python = _python_for_postgres_mcp()
        if python is None:
            raise SystemExit(
                "postgres-mcp needs Python >= 3.12 and none was found; set "
                "BENCH_POSTGRES_MCP_PYTHON or run with --no-postgres-mcp"
            )
        subprocess.run([python, "-m", "venv", str(POSTGRES_MCP_VENV)], check=True)
        pip = [str(POSTGRES_MCP_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        # postgres-mcp 0.3.0 pins pglast==7.2.0, which not every package index carries for
        # current Pythons, and it uses the mcp 1.x server API that mcp 2 removed. It is
        # installed without its pins, with the same major pglast and mcp 1.x.
        subprocess.run([*pip, "--no-deps", f"postgres-mcp=={POSTGRES_MCP_VERSION}"], check=True)
        subprocess.run([*pip, *POSTGRES_MCP_DEPENDENCIES], check=True)
    result = subprocess.run(
        [str(POSTGRES_MCP_VENV / "bin" / "python"), "-m", "pip", "show", "postgres-mcp"],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def contenders(
    dsn: str, *, with_postgres_mcp: bool, baseline: Path | None = None
) -> list[Contender]:
    """The servers to compare, all reading the same fixture database as `mcp_reader`.

    Given `baseline` (a tree of an earlier commit, as `git archive` writes it), this server
    as that commit built it runs last, for a before-and-after comparison in one run.
    """
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    servers = [
        Contender(
            name="mcp-server-suite (read_only_sql)",
            command=[sys.executable, "-m", "mcp_server_suite"],
            env=base_env
            | {"MCP_SQL_DSN": dsn, "MCP_METRICS_ENABLED": "false", "MCP_SQL_POOL_MAX_SIZE": "4"},
            tool="read_only_sql",
            argument="query",
            row_count=_structured_rows,
        ),
        Contender(
            name="SDK MCPServer, naive tool (run_sql)",
            command=[sys.executable, str(REPO_ROOT / "benchmarks" / "sdk_sql_server.py")],
            env=base_env | {"BENCH_DSN": dsn},
            tool="run_sql",
            argument="query",
            row_count=_sdk_rows,
        ),
    ]
    if with_postgres_mcp:
        servers.append(
            Contender(
                name="postgres-mcp, restricted (execute_sql)",
                command=[str(POSTGRES_MCP_BIN), "--access-mode=restricted"],
                env=base_env | {"DATABASE_URI": dsn},
                tool="execute_sql",
                argument="sql",
                row_count=_postgres_mcp_rows,
            )
        )
    if baseline is not None:
        servers.append(
            Contender(
                name=f"mcp-server-suite, baseline ({baseline.name})",
                command=[sys.executable, "-m", "mcp_server_suite"],
                env=servers[0].env | {"PYTHONPATH": str(baseline.resolve() / "src")},
                tool="read_only_sql",
                argument="query",
                row_count=_structured_rows,
            )
        )
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the tables; the exit status is 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round and mode")
    parser.add_argument("--policy-iterations", type=int, default=5000)
    parser.add_argument("--no-postgres-mcp", action="store_true")
    parser.add_argument(
        "--log-statements",
        action="store_true",
        help="log every statement in PostgreSQL, as the test suite's server does",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="also run this server from an earlier commit's tree (git archive COMMIT src)",
    )
    options = parser.parse_args(argv)

    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, psycopg {psycopg.__version__} "
        f"({psycopg.pq.__impl__} implementation), PostgreSQL log_statement = "
        + ("all" if options.log_statements else "none")
    )
    print("\npolicy cost per query (parse, check, qualify, wrap, parse and compare again)")
    print(f"{'query':<6} {'chars':>6} {'median us':>10} {'p99 us':>10} {'parse alone us':>15}")
    for label, chars, median, p99, parse in policy_cost(options.policy_iterations):
        print(f"{label:<6} {chars:>6} {median:>10,.0f} {p99:>10,.0f} {parse:>15,.0f}")

    version = None if options.no_postgres_mcp else ensure_postgres_mcp()
    server, base = start_postgres(log_statements=options.log_statements)
    tables: dict[bool, dict[str, Figures]] = {False: {}, True: {}}
    try:
        # The reader's own search_path holds built-in schemas only (the role script pins it);
        # the peers, which qualify nothing, are given the fixture's schema in their DSN. This
        # server pins its own search_path whatever the DSN says.
        if options.baseline is not None:
            # A fourth server's pool would pass the role's CONNECTION LIMIT.
            with server.connect() as conn:
                conn.execute("ALTER ROLE mcp_reader CONNECTION LIMIT 32")
        dsn = server.dsn() + "&options=-csearch_path%3Dpublic"
        servers = contenders(dsn, with_postgres_mcp=version is not None, baseline=options.baseline)
        for distinct in (False, True):
            tables[distinct] = measure(
                servers, calls=options.calls, rounds=options.rounds, distinct=distinct
            )
    finally:
        stop_postgres(server, base)

    met = True
    for distinct, figures in tables.items():
        kind = "a different literal each call" if distinct else "the same text each call"
        print(
            f"\nend to end, {ROWS}-row query, {kind}; median of {options.rounds} rounds, 1 and "
            f"{IN_FLIGHT} calls in flight" + (f"; postgres-mcp {version}" if version else "")
        )
        met = _print_table(figures, with_postgres_mcp=version is not None) and met
    return 0 if met else 1


def _print_table(figures: dict[str, Figures], *, with_postgres_mcp: bool) -> bool:
    width = max(len(name) for name in figures)
    print(
        f"{'server':<{width}}  {'1 in flight/s':>13}  {f'{IN_FLIGHT} in flight/s':>15}"
        f"  {'CPU us/call 1':>13}  {'CPU us/call 16':>14}"
    )
    for name, row in figures.items():
        print(
            f"{name:<{width}}  {row.sequential_rate:>13,.0f}  {row.pipelined_rate:>15,.0f}"
            f"  {row.sequential_cpu_us:>13,.0f}  {row.pipelined_cpu_us:>14,.0f}"
        )
    rows = list(figures.values())
    ours, sdk = rows[0], rows[1]
    checks = [
        ("1 in flight >= SDK", ours.sequential_rate / sdk.sequential_rate, 1.0),
        (f"{IN_FLIGHT} in flight >= SDK", ours.pipelined_rate / sdk.pipelined_rate, 1.0),
    ]
    if with_postgres_mcp:
        other = rows[2]
        checks += [
            ("1 in flight >= 10x postgres-mcp", ours.sequential_rate / other.sequential_rate, 10),
            (
                f"{IN_FLIGHT} in flight >= 10x postgres-mcp",
                ours.pipelined_rate / other.pipelined_rate,
                10,
            ),
        ]
    for label, ratio, target in checks:
        print(f"  {'met ' if ratio >= target else 'MISS'} {label:<34} (x{ratio:.2f})")
    return all(ratio >= target for _, ratio, target in checks)


if __name__ == "__main__":
    sys.exit(main())
