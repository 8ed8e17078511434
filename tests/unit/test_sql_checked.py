"""`read_only_sql`'s checked path (`SQLTool.run_checked`), held to the generic path.

Calls arrive by the registry's rule 7: the arguments are validated as they arrived, and the
result is checked once as JSON data and written by the model's own serializer. Each part is
held to the generic path with Hypothesis (accepting arguments against JSON-mode validation,
rendering against `ToolSpec.check_result`), and whole calls against a real server are
answered alike by both paths.
"""

import asyncio
import json
import warnings
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.core.registry import (
    OutputContractError,
    ToolOutput,
    ToolSpec,
    accept_arguments,
)
from mcp_server_suite.schemas.errors import PolicyViolation, ToolFailure
from mcp_server_suite.schemas.sql import MAX_QUERY_CHARS, ReadOnlySQLResult
from mcp_server_suite.tools.sql import build_sql_tools
from mcp_server_suite.tools.sql.session import FetchedRows
from mcp_server_suite.tools.sql.tool import result_output
from tests.support.postgres import PostgresServer, reader_settings


def _spec(settings: Settings | None = None) -> ToolSpec[Any, Any]:
    # Building the tool connects to nothing; the pool opens on the first call.
    settings = settings or Settings(sql_dsn=SecretStr("postgresql://nobody@/nowhere"))
    spec: ToolSpec[Any, Any] = build_sql_tools(settings)["read_only_sql"]
    return spec


# --- accepting arguments -------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["SELECT 1", "SELECT\x00 1", "      ", "x" * (MAX_QUERY_CHARS + 1)]),
    st.sampled_from([0, 1, 50, 51, 5.0]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
arguments = st.dictionaries(st.sampled_from(["query", "max_rows", "other"]), json_values)


@given(arguments=arguments)
@example(arguments={"query": "SELECT 1"})
@example(arguments={"query": "SELECT 1", "max_rows": True})
@example(arguments={"query": "SELECT 1", "max_rows": 5.0})
@example(arguments={"query": "SELECT 1", "max_rows": 50})
def test_accepting_arguments_is_json_mode_validation(arguments: dict[str, Any]) -> None:
    if "\\ud" in json.dumps(arguments).lower():
        return  # The JSON guard refuses lone surrogates before any of this runs.
    spec = _spec()
    accepted = accept_arguments(spec.params_model, arguments)
    try:
        validated = spec.parse_arguments(arguments)
    except PolicyViolation:
        assert accepted is None
    else:
        assert accepted == validated


# --- rendering results ---------------------------------------------------------------------

cells = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def fetched_rows(draw: st.DrawFn) -> FetchedRows:
    columns = draw(st.lists(st.text(max_size=8), max_size=4))
    width = len(columns) if draw(st.integers(0, 9)) else len(columns) + 1
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width), max_size=5))
    reason = draw(st.sampled_from([None, "max_rows", "max_result_bytes"]))
    truncated = (reason is not None) if draw(st.integers(0, 9)) else reason is None
    return FetchedRows(columns, rows, truncated, reason)


def _generic(fetched: FetchedRows) -> Any:
    # The generic path: the tool's `run` builds the model, then the registry checks it.
    try:
        result = ReadOnlySQLResult.model_validate(
            {
                "columns": fetched.columns,
                "rows": fetched.rows,
                "row_count": len(fetched.rows),
                "truncated": fetched.truncated,
                "truncated_reason": fetched.truncated_reason,
            }
        )
    except ValidationError:
        return "refused"
    output = _spec().check_result(result)
    return output.structured, output.text


def _checked(fetched: FetchedRows) -> Any:
    try:
        output = result_output(fetched)
    except OutputContractError:
        return "refused"
    return output.structured, output.text


@given(fetched=fetched_rows())
@example(fetched=FetchedRows(["a", "b"], [[1e16, -0.0], [5e-324, 2**64]], False))
@example(fetched=FetchedRows(["t"], [['\x00"\\\u2028\U0001f600']], True, "max_rows"))
@example(fetched=FetchedRows(["j"], [[{"a": [1, 2.5, None], "b": {"c": "d"}}]], False))
@example(fetched=FetchedRows(["a"], [[1, 2]], False))
@example(fetched=FetchedRows(["a"], [[1]], True))
def test_rendering_a_result_is_the_generic_check(fetched: FetchedRows) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _checked(fetched) == _generic(fetched)


# --- whole calls ---------------------------------------------------------------------------

CALLS: list[dict[str, Any]] = [
    {"query": "SELECT id, name, secret FROM t WHERE id <= 3 ORDER BY id"},
    {"query": "SELECT * FROM t ORDER BY id", "max_rows": 2},
    {
        "query": "SELECT 1.5::float8 AS f, 'NaN'::float8 AS nan, 12.50::numeric AS num, "
        "'2024-01-02 03:04:05+00'::timestamptz AS ts, '[1, 1e400, {\"a\": null}]'::json AS j, "
        "ARRAY[ARRAY['a', 'b']] AS a, '\\x00ff'::bytea AS b, chr(128512) AS e, NULL AS n"
    },
    {"query": "SELECT '" + "x" * 3000 + "' AS big FROM generate_series(1, 10)"},
    {"query": "EXPLAIN (FORMAT JSON, COSTS FALSE) SELECT * FROM t"},
]


@pytest.mark.postgres
def test_calls_are_answered_alike_by_both_paths(postgres_server: PostgresServer) -> None:
    spec = _spec(reader_settings(postgres_server, sql_max_result_bytes=16_384))

    run_checked = spec.run_checked
    assert run_checked is not None

    async def body() -> list[tuple[ToolOutput | None, ToolOutput]]:
        answers = []
        try:
            for arguments in CALLS:
                checked = await run_checked(arguments)
                generic = spec.check_result(await spec.run(spec.parse_arguments(arguments)))
                answers.append((checked, generic))
            # A refusal is the same refusal on both paths.
            refused = {"query": "SELECT pg_sleep(1)"}
            with pytest.raises(ToolFailure) as by_checked:
                await run_checked(refused)
            with pytest.raises(ToolFailure) as by_generic:
                await spec.run(spec.parse_arguments(refused))
            assert by_checked.value.problem == by_generic.value.problem
            # Arguments the model refuses are left to the generic path, which names them.
            assert await run_checked({"query": "SELECT 1", "max_rows": 0}) is None
        finally:
            assert spec.close is not None
            await spec.close()
        return answers

    answers = asyncio.run(body())
    for checked, generic in answers:
        assert checked == generic
    truncated = answers[3][1].structured
    assert (truncated["truncated"], truncated["truncated_reason"]) == (True, "max_result_bytes")
