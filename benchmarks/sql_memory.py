"""Peak memory and response size of `read_only_sql` for queries that build huge values.

Each query runs in a fresh server process (`python -m mcp_server_suite`, the default
`MCP_SQL_MAX_RESULT_BYTES` unless `--max-result-bytes` says otherwise) against the test
suite's throwaway PostgreSQL, as its least-privilege role; the script prints, per query, the
outcome, the response's size in bytes as it crossed the pipe, and the server's peak resident
set (`VmHWM` from /proc, read after the response and before the process exits). The queries
are the round-2 corpus's `resource` class and its relatives: values doubled by `||` in a
recursive CTE, `replace`, `string_agg` of millions of characters (ASCII, 4-byte emoji, control
characters that JSON escapes six-fold), many wide rows, and a million JSON elements.

Targets (issue 9): peak RSS under 128 MiB for any single query, and no response over 4 MiB
with the default bound. The exit status is 0 when both hold for every query.

With `--backend`, it measures PostgreSQL's side instead (issue 19, item 5): the peak
resident set of the backend that runs one huge value (`VmHWM` of the backend's process,
found through `pg_backend_pid()`, read after the rows have arrived), for the query sent
bare, inside the byte-bounding wrapper as it was before (`BEFORE_WRAPPER`, kept here for the
comparison) and inside today's (`statement.wrap_statement`), side by side, each on a fresh
connection. Its target: the wrapper holds the largest value at most once more than the bare
query does (the bare query holds it about three times: the value, its text and the
message), so the wrapper's peak stays within the bare query's plus the value's size.

Usage:
    python benchmarks/sql_memory.py [--max-result-bytes N]
    python benchmarks/sql_memory.py --backend [--sizes 8000,16000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from ndjson_client import NDJSONClient

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psycopg  # noqa: E402

from mcp_server_suite.tools.sql.statement import wrap_statement  # noqa: E402
from tests.support.postgres import start_postgres, stop_postgres  # noqa: E402

__all__ = ["main"]

# Issue 9's targets for the default bound.
MAX_PEAK_MIB = 128
MAX_RESPONSE_BYTES = 4 * 1024 * 1024

QUERIES = {
    "16 MiB by || doubling, length only": (
        "WITH RECURSIVE r(s, n) AS (SELECT md5(''), 0 UNION ALL SELECT s || s, n + 1 FROM r "
        "WHERE n < 19) SELECT length(s) FROM r WHERE n = 19"
    ),
    "16 MiB by || doubling, returned": (
        "WITH RECURSIVE r(s, n) AS (SELECT md5(''), 0 UNION ALL SELECT s || s, n + 1 FROM r "
        "WHERE n < 19) SELECT s FROM r WHERE n = 19"
    ),
    "51 rows of 2 MB": (
        "WITH b AS MATERIALIZED (SELECT string_agg(md5(g::text), '') AS s "
        "FROM generate_series(1, 62500) g) SELECT s FROM b, generate_series(1, 60)"
    ),
    "4 M emoji in string_agg": (
        "SELECT string_agg(chr(128512), '') FROM generate_series(1, 4000000)"
    ),
    "50 rows of 100 KB of control characters": (
        "SELECT g, string_agg(chr(1), '') FROM generate_series(1, 51) AS g, "
        "generate_series(1, 100000) GROUP BY g"
    ),
    "50 rows of 30 KB of emoji": (
        "SELECT g, string_agg(chr(128512), '') FROM generate_series(1, 51) AS g, "
        "generate_series(1, 7500) GROUP BY g"
    ),
    "replace to 64 MB": (
        "SELECT replace(replace(replace(md5('x'), 'a', md5('y')), 'b', md5('z')), 'c', "
        "string_agg(md5(g::text), '')) FROM generate_series(1, 20000) AS g"
    ),
    "a million JSON elements": "SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 1000000)",
    "JSON elements within the bound": (
        "SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 200000)"
    ),
}


# The wrapper as it was before issue 19 (item 5): each row formed as a record twice (the
# query's expressions with it) and rendered as a text value for its size, and every row,
# however large, copied into the window's tuplestore.
BEFORE_WRAPPER = (
    "SELECT r.*, w.mcp_result_bytes FROM (SELECT s.mcp_row, pg_catalog.sum(s.mcp_row_bytes) "
    "OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mcp_result_bytes FROM ("
    "SELECT (q.*)::pg_catalog.record AS mcp_row, "
    "pg_catalog.octet_length((q.*)::pg_catalog.text) AS mcp_row_bytes "
    "FROM (\n{query}\n) AS q LIMIT {rows}) AS s) AS w "
    "LEFT JOIN LATERAL (SELECT (w.mcp_row).*) AS r "
    "ON w.mcp_result_bytes OPERATOR(pg_catalog.<=) {budget}"
)
# Issue 19's huge value: `replace(s, 'a', s)` over a string_agg of N characters, N squared
# bytes (8,000: 64 MB; 16,000: 256 MB; 22,000: 484 MB).
HUGE_VALUE = (
    "SELECT replace(s, 'a', s) AS v FROM (SELECT string_agg('a', '') AS s "
    "FROM generate_series(1, {n})) AS x"
)
# A table's value, stored (and compressed) by PostgreSQL: detoasted on the way out.
STORED_VALUE = "SELECT * FROM public.mcp_bench_huge"
DEFAULT_SIZES = "8000,16000"
# The default MCP_SQL_MAX_RESULT_BYTES and row cap, as the server wraps a call.
BUDGET = 1_048_576
ROWS = 51


def backend_peak(dsn: str, sql: str) -> tuple[float, float]:
    """Run `sql` on a fresh connection; return the backend's peak RSS in MiB and seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '600s'")
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        pid = int(row[0]) if row else 0
        started = time.perf_counter()
        conn.execute(sql.encode()).fetchall()
        elapsed = time.perf_counter() - started
        return status_kib(pid, "VmHWM") / 1024, elapsed


def backend_main(dsn: str, superuser: psycopg.Connection[Any], sizes: list[int]) -> bool:
    """Print the backend's peak for each case, bare, before and after; True when every
    wrapper peak stays within the bare query's plus the value's size."""
    side = 8000
    superuser.execute("CREATE TABLE public.mcp_bench_huge AS " + HUGE_VALUE.format(n=side))
    superuser.execute("GRANT SELECT ON public.mcp_bench_huge TO mcp_reader")
    cases = [(f"replace to {n * n / 1e6:,.0f} MB", HUGE_VALUE.format(n=n), n * n) for n in sizes]
    cases.append((f"stored {side * side / 1e6:,.0f} MB value", STORED_VALUE, side * side))
    print("backend peak RSS (VmHWM, MiB) and time (s) of one huge value, bound 1 MiB")
    print(f"{'case':<24} {'bare':>14} {'before':>14} {'after':>14}  after - bare")
    met = True
    for label, query, size in cases:
        figures = [
            backend_peak(dsn, sql)
            for sql in (
                query,
                BEFORE_WRAPPER.format(query=query, rows=ROWS, budget=BUDGET),
                wrap_statement(query, max_rows=ROWS - 1, max_result_bytes=BUDGET).sql,
            )
        ]
        extra = figures[2][0] - figures[0][0]
        ok = extra <= size / 1024 / 1024 * 1.1
        met = met and ok
        cells = " ".join(f"{peak:>8.0f} {seconds:>5.1f}" for peak, seconds in figures)
        print(f"{label:<24} {cells}  {extra:>+8.0f}{'' if ok else ' MISS'}")
    return met


def status_kib(pid: int, field: str) -> int:
    """Return a `/proc/<pid>/status` field in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def run_one(dsn: str, text: str, max_result_bytes: int | None) -> tuple[str, int, float]:
    """Run one query in a fresh server; return (outcome, response bytes, peak MiB)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "MCP_SQL_DSN": dsn,
        "MCP_METRICS_ENABLED": "false",
        "MCP_SQL_QUERY_TIMEOUT": "60",
        "MCP_TOOL_TIMEOUT_SECONDS": "90",
    }
    if max_result_bytes is not None:
        env["MCP_SQL_MAX_RESULT_BYTES"] = str(max_result_bytes)
    client = NDJSONClient([sys.executable, "-m", "mcp_server_suite"], env)
    try:
        client.handshake()
        before = len(client._buffer)  # What is already read is not this reply.
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read_only_sql", "arguments": {"query": text}},
        }
        client.send(request)
        reply = client.receive()
        size = len(__import__("json").dumps(reply).encode()) - before
        peak = status_kib(client.process.pid, "VmHWM") / 1024
    finally:
        client.close()
    result = reply.get("result", {})
    if result.get("isError"):
        detail = __import__("json").loads(result["content"][0]["text"])["detail"]
        outcome = "refused: " + detail[:70]
    elif "error" in reply:
        outcome = f"error {reply['error']['code']}"
    else:
        structured = result["structuredContent"]
        outcome = (
            f"{structured['row_count']} rows, truncated_reason {structured['truncated_reason']}"
        )
    return outcome, size, peak


def main(argv: list[str] | None = None) -> int:
    """Run every query and print the table; 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-result-bytes", type=int, default=None)
    parser.add_argument("--backend", action="store_true", help="measure PostgreSQL's side")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="string_agg lengths, by commas")
    options = parser.parse_args(argv)
    server, base = start_postgres(log_statements=False)
    met = True
    try:
        with server.connect() as conn:
            conn.execute("ALTER ROLE mcp_reader SET statement_timeout = '60s'")
            if options.backend:
                sizes = [int(size) for size in options.sizes.split(",")]
                return 0 if backend_main(server.dsn(), conn, sizes) else 1
        print(
            f"MCP_SQL_MAX_RESULT_BYTES = {options.max_result_bytes or 'default (1048576)'}; "
            f"targets: peak RSS < {MAX_PEAK_MIB} MiB, response <= 4 MiB"
        )
        print(f"{'query':<42} {'response bytes':>15} {'VmHWM MiB':>10}  outcome")
        for label, text in QUERIES.items():
            outcome, size, peak = run_one(server.dsn(), text, options.max_result_bytes)
            ok = peak < MAX_PEAK_MIB and (
                options.max_result_bytes is not None or size <= MAX_RESPONSE_BYTES
            )
            met = met and ok
            print(f"{label:<42} {size:>15,} {peak:>10.1f}  {'' if ok else 'MISS '}{outcome}")
    finally:
        stop_postgres(server, base)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
