"""A stored value compared with every element of an unbounded array is refused.

`x = ANY (array)` loops over the array without checking for cancellation, and a wide value
read from a table is fetched again for every element (`array_comparison.py`; the control that
shows it ignoring the timeout is in `test_sql_interrupts.py`). The refusal holds for every
spelling PostgreSQL resolves to that loop, and every bounded form still runs.
"""

from typing import Any

import pytest

from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.array_comparison import is_unbounded
from mcp_server_suite.tools.sql.node_text import Node
from tests.support.postgres import PostgresServer, reader_settings
from tests.unit.test_sql_tool import query, query_failure

# A text, a numeric and their arrays, as a table would hold them.
_ROW = (
    "FROM (VALUES ('a'::text, 1.5::numeric, ARRAY['a', 'b'], ARRAY[1.5], 2, ARRAY[1, 2])) "
    "AS v(t, n, ta, na, i, ia)"
)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "text",
    [
        f"SELECT n = ANY(na) {_ROW}",
        f"SELECT t < ALL(ta) {_ROW}",
        f"SELECT t <> ALL(ta) {_ROW}",
        # Every way of reaching the value or the array: through an expression, an aggregate,
        # a window function, a subquery, a cast, an array of arrays, a function's array.
        f"SELECT coalesce(t, '') = ANY(ta) {_ROW}",
        f"SELECT upper(t) = ANY(ta) {_ROW}",
        f"SELECT max(t) = ANY(max(ta)) {_ROW}",
        f"SELECT first_value(t) OVER () = ANY(ta) {_ROW}",
        f"SELECT (SELECT t) = ANY(ta) {_ROW}",
        f"SELECT t::varchar = ANY(ta::varchar[]) {_ROW}",
        f"SELECT t = ANY(ARRAY[ta, ta]) {_ROW}",
        f"SELECT t = ANY(array_fill(t, ARRAY[3])) {_ROW}",
        f"SELECT t = ANY(ARRAY(SELECT t)) {_ROW}",
        f"SELECT * {_ROW} WHERE t = ANY(ta) OR n IS NULL",
    ],
)
def test_a_stored_value_against_an_unbounded_array_is_refused(
    postgres_server: PostgresServer, text: str
) -> None:
    failure = query_failure(reader_settings(postgres_server), text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert "op ANY or op ALL" in failure.problem.detail
    assert "unnest(array)" in failure.problem.detail


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("text", "rows"),
    [
        # A constant against any array: the loop is linear in the array.
        (f"SELECT 'a' = ANY(ta), 1.5 = ANY(na) {_ROW}", [[True, True]]),
        # Any value against an array the query writes out, however it is spelled.
        (f"SELECT t = ANY(ARRAY['a', 'b']), n = ANY(ARRAY[1, 2]) {_ROW}", [[True, False]]),
        (f"SELECT t IN ('b', 'c'), n NOT IN (1, 2) {_ROW}", [[False, True]]),
        (f"SELECT t = ANY('{{a,b}}'::text[]), t = ANY(ARRAY[t, upper(t)]) {_ROW}", [[True, True]]),
        # A value of a fixed length, which is never stored out of line.
        (f"SELECT i = ANY(ia), length(t) = ANY(ia), i > ALL(ia) {_ROW}", [[True, True, False]]),
        # What the refusal advises.
        (
            f"SELECT EXISTS (SELECT FROM unnest(ta) AS e WHERE e = t) {_ROW}",  # noqa: S608  # A constant.
            [[True]],
        ),
    ],
)
def test_bounded_comparisons_with_arrays_still_run(
    postgres_server: PostgresServer, text: str, rows: list[list[Any]]
) -> None:
    assert query(reader_settings(postgres_server), text).rows == rows


def test_a_malformed_comparison_counts_as_unbounded() -> None:
    assert is_unbounded(Node("SCALARARRAYOPEXPR", {"args": None}))
    scalar = Node("VAR", {"vartype": "25"})
    assert is_unbounded(Node("SCALARARRAYOPEXPR", {"args": [scalar, None]}))
    # A bare token where the scalar should be names no type and reads nothing.
    assert not is_unbounded(Node("SCALARARRAYOPEXPR", {"args": ["1", scalar]}))
    # A scalar nested deeper than the search goes counts as holding a stored value.
    deep: Node = Node("CONST", {"consttype": "25"})
    for _ in range(300):
        deep = Node("FUNCEXPR", {"funcresulttype": "25", "args": [deep]})
    assert is_unbounded(Node("SCALARARRAYOPEXPR", {"args": [deep, scalar]}))
