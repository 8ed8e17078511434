"""The error model: a self-consistent problem table; exceptions become JSON in one place."""

import dataclasses
import json
from typing import Any

import pytest

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import (
    DeadlineExceeded,
    InvalidParams,
    MethodNotFound,
    ParseError,
    PolicyViolation,
    ProtocolError,
    ToolFailure,
    UnsupportedVersion,
    new_correlation_id,
    to_wire,
)
from mcp_server_suite.schemas.problems import PROBLEM_TYPES, JSONRPCCode, MCPErrorCode, Problem

# The design document's error table, row by row, and the two rows the protocol core adds.
TABLE = [
    (MCPErrorCode.VALIDATION_ERROR, "urn:mcp-server-suite:problem:validation-error", 422, -32602),
    (MCPErrorCode.INVALID_PARAMS, "urn:mcp-server-suite:problem:invalid-params", 400, -32602),
    (MCPErrorCode.INVALID_CURSOR, "urn:mcp-server-suite:problem:invalid-cursor", 400, -32602),
    (MCPErrorCode.ACCESS_DENIED, "urn:mcp-server-suite:problem:access-denied", 403, -32001),
    (MCPErrorCode.QUERY_VIOLATION, "urn:mcp-server-suite:problem:query-violation", 403, -32002),
    (MCPErrorCode.EXECUTION_TIMEOUT, "urn:mcp-server-suite:problem:execution-timeout", 504, -32003),
    (MCPErrorCode.INTERNAL_ERROR, "urn:mcp-server-suite:problem:internal-error", 500, -32603),
]


@pytest.mark.parametrize(("code", "uri", "status", "jsonrpc"), TABLE)
def test_table_matches_the_design_document(
    code: MCPErrorCode, uri: str, status: int, jsonrpc: int
) -> None:
    row = PROBLEM_TYPES[code]
    assert (row.uri, row.status, int(row.jsonrpc_code)) == (uri, status, jsonrpc)
    problem = Problem.of(code, "d")
    assert (problem.type, problem.status, int(problem.jsonrpc_code)) == (uri, status, jsonrpc)


def test_every_code_has_a_row() -> None:
    assert set(PROBLEM_TYPES) == set(MCPErrorCode)


def test_each_row_is_a_problem_type_of_its_own() -> None:
    # RFC 9457: the type names the kind of problem and the title summarises it, for every
    # occurrence; two rows sharing either would make one of them meaningless.
    rows = list(PROBLEM_TYPES.values())
    assert len({row.uri for row in rows}) == len(rows)
    assert len({row.title for row in rows}) == len(rows)


@pytest.mark.parametrize(
    "changes",
    [
        {"type": "urn:mcp-server-suite:problem:access-denied"},
        {"title": "Something else"},
        {"status": 400},
    ],
)
def test_a_problem_cannot_disagree_with_its_row(changes: dict[str, Any]) -> None:
    problem = Problem.of(MCPErrorCode.VALIDATION_ERROR, "d")
    with pytest.raises(ValueError, match="disagree"):
        dataclasses.replace(problem, **changes)


def test_problem_is_frozen_with_read_only_metadata() -> None:
    problem = Problem.of(MCPErrorCode.INTERNAL_ERROR, "d", metadata={"retryable": True})
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.detail = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        problem.metadata["retryable"] = False  # type: ignore[index]


def test_problem_metadata_must_be_scalars() -> None:
    with pytest.raises(ValueError, match="scalars"):
        Problem.of(MCPErrorCode.INTERNAL_ERROR, "d", metadata={"nested": {"a": 1}})  # type: ignore[dict-item]


def test_problem_detail_is_bounded() -> None:
    problem = Problem.of(MCPErrorCode.VALIDATION_ERROR, "x" * 2000)
    assert len(problem.detail) == 1024
    assert problem.detail.endswith("...")
    with pytest.raises(ValueError, match="longer than 1024"):
        dataclasses.replace(problem, detail="x" * 1025)


def test_problem_text_uses_default_separators_in_documented_order() -> None:
    problem = Problem.of(MCPErrorCode.INTERNAL_ERROR, "busy", metadata={"retryable": True})
    text = problem.as_text()
    assert text.startswith('{"type": "urn:mcp-server-suite:problem:internal-error", "title": ')
    assert list(json.loads(text)) == [
        "type",
        "title",
        "status",
        "detail",
        "code",
        "invalid_params",
        "metadata",
    ]


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ParseError("p"), -32700),
        (ProtocolError("r"), -32600),
        (MethodNotFound("m"), -32601),
        (InvalidParams("i", request_id=1, invalid_params=("x",)), -32602),
    ],
)
def test_protocol_errors_keep_their_code_and_message(exc: ProtocolError, code: int) -> None:
    wire = to_wire(exc)
    assert wire["code"] == code
    assert wire["message"] == exc.message


def test_invalid_params_carry_an_invalid_params_problem() -> None:
    wire = to_wire(InvalidParams("bad", request_id=1, invalid_params=("name",)))
    data = wire["data"]
    assert isinstance(data, dict)
    assert data["code"] == "MCP_INVALID_PARAMS"
    assert data["title"] == "Invalid request parameters"
    assert data["detail"] == "bad"
    assert data["invalid_params"] == ["name"]


def test_invalid_params_may_name_a_more_particular_type() -> None:
    exc = InvalidParams(
        "c", request_id=1, invalid_params=("cursor",), code=MCPErrorCode.INVALID_CURSOR
    )
    data = to_wire(exc)["data"]
    assert isinstance(data, dict)
    assert (data["code"], data["title"]) == ("MCP_INVALID_CURSOR", "Invalid pagination cursor")


def test_unsupported_version_carries_the_schema_data() -> None:
    exc = UnsupportedVersion("1900-01-01", ("2026-07-28", "2025-11-25"), request_id="r")
    assert exc.request_id == "r"
    assert to_wire(exc) == {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": ["2026-07-28", "2025-11-25"], "requested": "1900-01-01"},
    }


def test_tool_failures_travel_with_their_problem() -> None:
    wire = to_wire(ToolFailure("no", code=MCPErrorCode.ACCESS_DENIED))
    assert wire["code"] == -32001
    assert wire["message"] == "Access to the requested resource is denied"


def test_failure_defaults() -> None:
    assert PolicyViolation("x").problem.code is MCPErrorCode.VALIDATION_ERROR
    assert DeadlineExceeded("x").problem.code is MCPErrorCode.EXECUTION_TIMEOUT


def test_unknown_exceptions_reveal_nothing() -> None:
    password = "hunter2"  # noqa: S105  # hygiene: allow-secret-fixture
    wire = to_wire(RuntimeError(f"secret /etc/shadow postgresql://u:{password}@db"))
    text = json.dumps(wire)
    assert password not in text
    assert "/etc" not in text
    assert wire["code"] == JSONRPCCode.INTERNAL_ERROR
    data = wire["data"]
    assert isinstance(data, dict)
    assert isinstance(data["metadata"], dict)
    assert len(str(data["metadata"]["correlation_id"])) == 16


def test_correlation_ids_are_fresh() -> None:
    assert new_correlation_id() != new_correlation_id()
    wire = to_wire(ValueError(), correlation_id="fixed")
    assert wire["data"]["metadata"] == {"correlation_id": "fixed"}  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abc", 10, "'abc'"),
        ("a\u202eb", 10, "'a\\u202eb'"),
        ("a\x00b", 10, "'a\\x00b'"),
        ("abcdef", 3, "'abc' (cut at 3 characters)"),
        ("it's", 10, '"it\'s"'),
    ],
)
def test_quote_escapes_and_bounds(text: str, limit: int, expected: str) -> None:
    assert quote(text, limit) == expected
