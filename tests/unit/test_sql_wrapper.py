"""The byte-bounding wrapper (`statement.py`, Rule 2) in PostgreSQL's backend.

The wrapper must bound the result without multiplying the largest value in the backend:
the caller's expressions run once, each row is formed as a record once, its size is read
from the record's text without a second copy as a text value, and a row past the bound
never reaches the window's tuplestore. These tests measure what the backend holds (its
peak resident set, `VmHWM`, through `pg_backend_pid()`) for a value of 16 MB, sent bare and
wrapped, each on a fresh connection, and read the plan for the rest. The figures for the
issue's 64 MB and 256 MB cases come from `benchmarks/sql_memory.py --backend`.

An EXPLAIN runs without the wrapper: the server keeps its rows within the same bounds as
they arrive (`session.py`, Rule 9), and refuses a plan in one row past the bound.
"""

import asyncio
from typing import Final

import pytest

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams, ReadOnlySQLResult
from mcp_server_suite.tools.sql.statement import wrap_statement
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import READER_ROLE, PostgresServer, reader_settings

# 4,000 squared: a 16 MB value, large enough to stand out of a backend's own few MiB, small
# enough for a loaded test machine.
SIDE: Final = 4_000
VALUE_MIB: Final = SIDE * SIDE / 1024 / 1024
HUGE: Final = (
    "SELECT replace(s, 'a', s) AS v FROM (SELECT string_agg('a', '') AS s "  # noqa: S608  # A constant.
    f"FROM generate_series(1, {SIDE})) AS x"
)
BUDGET: Final = 1_048_576


def _peak_mib(server: PostgresServer, sql: str) -> float:
    # The peak resident set of a fresh backend that ran `sql` and sent its rows.
    with server.connect(READER_ROLE) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        conn.execute(sql.encode()).fetchall()
        with open(f"/proc/{row[0]}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.postgres
def test_the_wrapper_holds_the_largest_value_at_most_once_more_than_the_bare_query(
    postgres_server: PostgresServer,
) -> None:
    wrapped = wrap_statement(HUGE, max_rows=50, max_result_bytes=BUDGET).sql
    # Measured twice each, the smaller kept: a backend's peak is its own, but the first
    # run of a connection can page in more of the server's shared code.
    bare = min(_peak_mib(postgres_server, HUGE) for _ in range(2))
    peak = min(_peak_mib(postgres_server, wrapped) for _ in range(2))
    # The bare query holds the value about three times (the value, its text and the
    # message); the wrapper about twice (the value and its record, then the record's text),
    # and sends none of it. The wrapper before issue 19 held it some eight times (five
    # more than bare).
    assert peak - bare <= 1.5 * VALUE_MIB, (bare, peak)


@pytest.mark.postgres
def test_the_caller_expressions_run_once_and_no_text_value_is_made(
    postgres_server: PostgresServer,
) -> None:
    wrapped = wrap_statement(HUGE, max_rows=50, max_result_bytes=BUDGET).sql
    with postgres_server.connect(READER_ROLE) as conn:
        plan = "\n".join(
            str(row[0]) for row in conn.execute(f"EXPLAIN (VERBOSE, COSTS OFF) {wrapped}".encode())
        )
    # The query's expression is computed by one node (a node above it that passes the value
    # on shows it in parentheses).
    computed = [
        line for line in plan.splitlines() if "replace(" in line and "Output: (" not in line
    ]
    assert len(computed) == 1, plan
    assert "ROW(replace(" in computed[0]
    # The size comes from the record's C string, never from a cast to text.
    assert "record_out" in plan
    assert "octet_length" not in plan


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("sizes", "kept"),
    [
        # Each row's text is its value's length plus the record's parentheses.
        ((10, 20, 30), 3),
        ((400_000, 400_000, 400_000), 2),
        # A row past the bound alone stops the rows there, whatever follows.
        ((10, 2_000_000, 10), 1),
        ((2_000_000, 10), 0),
    ],
)
def test_the_running_total_keeps_rows_within_the_bound(
    postgres_server: PostgresServer, sizes: tuple[int, ...], kept: int
) -> None:
    values = ", ".join(f"({index}, {size})" for index, size in enumerate(sizes))
    query = f"SELECT repeat('x', n) FROM (VALUES {values}) AS t(i, n) ORDER BY i"  # noqa: S608  # Integers.
    wrapped = wrap_statement(query, max_rows=50, max_result_bytes=BUDGET).sql
    with postgres_server.connect(READER_ROLE) as conn:
        rows = conn.execute(wrapped.encode()).fetchall()
    totals = [int(total) for _, total in rows]
    running = 0
    for index, size in enumerate(sizes):
        running += size + 2
        assert totals[index] == running
    assert [value is not None for value, _ in rows] == [i < kept for i in range(len(sizes))]
    assert all(len(value) == size for (value, _), size in zip(rows[:kept], sizes, strict=False))


# A plan whose filter line alone is about 10 KB: 350 comparisons, in a query under the
# 10,000 characters a call may send.
_LONG_FILTER: Final = " OR ".join(f"name = 'n{i:05d}'" for i in range(350))
_SMALL_BUDGET: Final = 4_096


def _explain(server: PostgresServer, text: str, max_rows: int = 50) -> object:
    async def main() -> object:
        tool = SQLTool(reader_settings(server, sql_max_result_bytes=_SMALL_BUDGET))
        try:
            return await tool.run(ReadOnlySQLParams(query=text, max_rows=max_rows))
        except ToolFailure as exc:
            return exc
        finally:
            await tool.aclose()

    return asyncio.run(main())


@pytest.mark.postgres
def test_an_explain_keeps_no_more_of_its_plan_than_the_bound(
    postgres_server: PostgresServer,
) -> None:
    # Fifty lines of some 250 bytes each: three times the bound, within the response bound
    # that alone cut such a plan before.
    branches = (
        f"SELECT id, name, '{'p' * 200}{i}' AS k FROM t WHERE name > 'x{i}'"  # noqa: S608
        for i in range(30)
    )
    result = _explain(postgres_server, "EXPLAIN (VERBOSE) " + " UNION ALL ".join(branches))
    assert isinstance(result, ReadOnlySQLResult)
    assert result.truncated_reason == "max_result_bytes"
    assert result.row_count > 0
    assert sum(len(str(row[0]).encode()) for row in result.rows) <= _SMALL_BUDGET
    # The row cap holds as for any result.
    # A sort over a scan is a plan of several lines on every major.
    capped = _explain(postgres_server, "EXPLAIN SELECT * FROM t ORDER BY name", max_rows=1)
    assert isinstance(capped, ReadOnlySQLResult)
    assert (capped.row_count, capped.truncated_reason) == (1, "max_rows")


@pytest.mark.postgres
def test_a_plan_in_one_row_past_the_bound_is_refused(postgres_server: PostgresServer) -> None:
    text = "EXPLAIN (FORMAT JSON, VERBOSE) SELECT * FROM t WHERE " + _LONG_FILTER  # noqa: S608
    failure = _explain(postgres_server, text)
    assert isinstance(failure, ToolFailure)
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.metadata["max_result_bytes"] == _SMALL_BUDGET
    assert int(failure.problem.metadata["row_bytes"]) > _SMALL_BUDGET  # type: ignore[arg-type]  # An int.
