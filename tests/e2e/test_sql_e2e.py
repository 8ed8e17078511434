"""`read_only_sql` through the real server process, and through the official SDK client.

The server runs as `python -X dev -m mcp_server_suite` (the shared harness in
`tests/support/harness.py`) against the suite's throwaway PostgreSQL, over its Unix socket.
"""

# ruff: noqa: S608
# (The tests build SQL text on purpose: hostile queries are what they feed the policy.)

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.harness import ServerProcess, running_server
from tests.support.postgres import PASSWORD_ROLE, PostgresServer
from tests.support.sdk import sdk_session

TOOL = "read_only_sql"
# A count that runs for hours yet keeps nothing: a set-returning function in FROM would be
# stored first, and could meet temp_file_limit before the test stops it.
SLOW_COUNT = "SELECT count(*) FROM (SELECT generate_series(1, 100000000000) AS g) AS s"


def sql_environment(dsn: str, **extra: str) -> dict[str, str]:
    return {"MCP_SQL_DSN": dsn, "MCP_METRICS_ENABLED": "false", **extra}


@pytest.fixture
def server(postgres_server: PostgresServer) -> Iterator[ServerProcess]:
    environment = sql_environment(postgres_server.dsn(), MCP_SQL_QUERY_TIMEOUT="5")
    with running_server(environment) as process:
        process.initialize()
        yield process


def problem_of(response: dict[str, Any]) -> dict[str, Any]:
    result = response["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    problem: dict[str, Any] = json.loads(result["content"][0]["text"])
    return problem


@pytest.mark.e2e
@pytest.mark.postgres
def test_tool_is_advertised(server: ServerProcess) -> None:
    tools = server.request("tools/list")["result"]["tools"]
    assert [tool["name"] for tool in tools] == [TOOL, "sql_schema"]
    schema = tools[0]["inputSchema"]
    assert schema["required"] == ["max_rows", "query"]
    assert schema["properties"]["max_rows"]["type"] == ["integer", "null"]
    assert schema["properties"]["max_rows"]["maximum"] == 50
    assert tools[0]["annotations"]["readOnlyHint"] is True


@pytest.mark.e2e
@pytest.mark.postgres
def test_query_returns_structured_and_text_results(server: ServerProcess) -> None:
    response = server.call_tool(TOOL, {"query": "SELECT id, name FROM t ORDER BY id"})
    result = response["result"]
    assert result["isError"] is False
    structured = result["structuredContent"]
    assert structured["columns"] == ["id", "name"]
    assert structured["row_count"] == 50
    assert structured["truncated"] is True
    assert structured["rows"][:2] == [[1, "n1"], [2, "n2"]]
    assert json.loads(result["content"][0]["text"]) == structured


@pytest.mark.e2e
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("query", "code", "detail"),
    [
        ("SELECT 1; DROP TABLE victim", "MCP_QUERY_VIOLATION", "Exactly one statement"),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "MCP_QUERY_VIOLATION", "DELETE"),
        ("SELECT pg_sleep(10)", "MCP_QUERY_VIOLATION", "Function pg_sleep() is not allowed"),
        ("SELECT * FROM private", "MCP_ACCESS_DENIED", "SQLSTATE 42501"),
        ("SELECT * FROM v_evil", "MCP_QUERY_VIOLATION", "public.evil()"),
        ("SELECT nope FROM t", "MCP_VALIDATION_ERROR", "SQLSTATE 42703"),
    ],
)
def test_refusals_are_in_band_problems(
    server: ServerProcess, query: str, code: str, detail: str
) -> None:
    problem = problem_of(server.call_tool(TOOL, {"query": query}))
    assert problem["code"] == code
    assert detail in problem["detail"]
    assert problem["invalid_params"] == ["query"]


@pytest.mark.e2e
@pytest.mark.postgres
def test_a_user_type_is_named_unqualified(server: ServerProcess) -> None:
    # The fixture's enum public.mood, named as relations are (issue 19, item 7).
    text = "SELECT 'a'::mood AS m, enum_range(NULL::mood) AS r, mood 'a' = 'a'::public.mood AS s"
    result = server.call_tool(TOOL, {"query": text})["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["rows"] == [["a", "{a}", True]]


@pytest.mark.e2e
@pytest.mark.postgres
def test_sixteen_queries_in_flight(server: ServerProcess) -> None:
    for request_id in range(100, 116):
        server.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {
                    "name": TOOL,
                    "arguments": {"query": f"SELECT {request_id} AS n, count(*) FROM t"},
                },
            }
        )
    answers = {}
    for _ in range(16):
        message = server.recv()
        answers[message["id"]] = message["result"]["structuredContent"]["rows"]
    assert answers == {n: [[n, 500]] for n in range(100, 116)}


@pytest.mark.e2e
@pytest.mark.postgres
def test_cancelled_call_gets_no_answer_and_the_query_stops(
    postgres_server: PostgresServer,
) -> None:
    application = f"mcp-e2e-{uuid.uuid4().hex[:8]}"
    environment = sql_environment(
        postgres_server.dsn(), MCP_SQL_QUERY_TIMEOUT="60", MCP_SQL_APPLICATION_NAME=application
    )
    with running_server(environment) as process:
        process.initialize()
        process.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {
                    "name": TOOL,
                    "arguments": {"query": SLOW_COUNT},
                },
            }
        )
        with postgres_server.connect() as admin:

            def active() -> int:
                # The slow query's backend only: the pool may be setting up a second
                # connection meanwhile, whose own statements are active for a moment.
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND state = 'active' AND query LIKE %s",
                    [application, "%generate_series(1, 100000000000) AS g%"],
                ).fetchone()
                return int(row[0]) if row else 0

            deadline = time.monotonic() + 10
            while not active() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert active() == 1
            process.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": 7, "reason": "test"},
                }
            )
            deadline = time.monotonic() + 10
            while active() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert active() == 0
        # No answer to the cancelled call; the next call is served.
        answer = process.call_tool(TOOL, {"query": "SELECT 1 AS one"})
        assert answer["id"] != 7
        assert answer["result"]["structuredContent"]["rows"] == [[1]]


@pytest.mark.e2e
@pytest.mark.postgres
def test_a_refused_login_is_in_band_without_the_dsn(
    postgres_server: PostgresServer,
) -> None:
    # The operator's configuration, not this server's fault: an in-band problem that says
    # what to fix, and one line on stderr; the password reaches neither.
    secret = "E2e-secret-" + uuid.uuid4().hex
    dsn = postgres_server.dsn(PASSWORD_ROLE, password=secret)
    with running_server(sql_environment(dsn, MCP_SQL_CONNECT_TIMEOUT="1")) as process:
        process.initialize()
        response = process.call_tool(TOOL, {"query": "SELECT 1"})
        result = response["result"]
        assert result["isError"] is True
        problem = json.loads(result["content"][0]["text"])
        assert problem["metadata"] == {"sqlstate": "28P01", "cause": "configuration"}
        assert "MCP_SQL_DSN" in problem["detail"]
        assert secret not in json.dumps(response)
        process.close_stdin()
        assert process.wait() == 0
        stderr = process.stderr
    assert "read_only_sql: PostgreSQL refused the login" in stderr
    assert secret not in stderr


@pytest.mark.interop
@pytest.mark.postgres
def test_official_sdk_client_runs_a_query(postgres_server: PostgresServer) -> None:
    listed, (good, bad) = sdk_session(
        sql_environment(postgres_server.dsn()),
        [
            (TOOL, {"query": "SELECT id, name FROM t ORDER BY id LIMIT 3", "max_rows": 2}),
            (TOOL, {"query": "SELECT 1; COMMIT; DROP TABLE t"}),
        ],
    )
    assert [tool.name for tool in listed.tools] == [TOOL, "sql_schema"]
    assert listed.tools[0].annotations.read_only_hint is True
    assert good.is_error is False
    assert good.structured_content == {
        "columns": ["id", "name"],
        "rows": [[1, "n1"], [2, "n2"]],
        "row_count": 2,
        "truncated": True,
        "truncated_reason": "max_rows",
    }
    assert json.loads(good.content[0].text) == good.structured_content
    assert bad.is_error is True
    assert json.loads(bad.content[0].text)["code"] == "MCP_QUERY_VIOLATION"
