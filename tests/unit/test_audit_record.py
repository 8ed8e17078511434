"""Audit records: RFC 8785 canonical arguments, their digest, and the JSON line of a call."""

import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.audit.record import (
    CANCELLED,
    MAX_RECORDED_ARGUMENTS_BYTES,
    Crashed,
    Outcome,
    Refused,
    Succeeded,
    build_record,
    canonical_json,
    ecmascript_number,
)
from mcp_server_suite.core.server import ClientInfo
from mcp_server_suite.schemas.problems import MCPErrorCode

VECTORS = json.loads(
    (Path(__file__).parents[1] / "vectors" / "jcs.json").read_text(encoding="utf-8")
)

# 2023-11-14T22:13:20 UTC, and a fraction with digits in every place.
STARTED_NS = 1_700_000_000_123_456_789

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def record(outcome: Outcome = CANCELLED, **overrides: Any) -> dict[str, Any]:
    members: dict[str, Any] = {
        "session": "0123456789abcdef",
        "started_ns": STARTED_NS,
        "duration_s": 0.0123456,
        "request_id": 7,
        "client": ClientInfo.of("claude-code", "2.1.0"),
        "tool": "read_only_sql",
        "arguments": {"query": "SELECT 1", "max_rows": 5},
        "arguments_mode": "digest",
        "outcome": outcome,
    }
    members.update(overrides)
    line = build_record(**members)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert line.isascii()
    parsed: dict[str, Any] = json.loads(line)
    return parsed


# --- canonical JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(("bits", "expected"), VECTORS["numbers"])
def test_numbers_are_written_as_ecmascript_writes_them(bits: str, expected: str) -> None:
    value = struct.unpack("<d", bytes.fromhex(bits))[0]
    assert ecmascript_number(value) == expected


@pytest.mark.parametrize(("text", "expected"), VECTORS["documents"])
def test_documents_match_the_ecmascript_canonical_form(text: str, expected: str) -> None:
    assert canonical_json(json.loads(text)) == expected.encode("utf-8")


def test_the_vectors_cover_the_rfc_examples() -> None:
    assert len(VECTORS["numbers"]) > 1000
    assert len(VECTORS["documents"]) > 100
    assert VECTORS["documents"][0][1] == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


def test_members_sort_by_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+FB33 in UTF-16, although
    # its code point is larger.
    document = {"\ufb33": 1, "\U0001f600": 2, "\u20ac": 3, "1": 4, "\r": 5, "\x80": 6}
    assert canonical_json(document) == (
        '{"\\r":5,"1":4,"\x80":6,"\u20ac":3,"\U0001f600":2,"\ufb33":1}'.encode()
    )


def test_integers_beyond_the_double_range_keep_their_digits() -> None:
    # JCS would round both to 9007199254740992 and give two arguments one digest.
    assert canonical_json({"n": 2**53 + 1}) == b'{"n":9007199254740993}'
    assert canonical_json(2**53 + 1) != canonical_json(2**53)
    assert canonical_json(10**30) == b"1" + b"0" * 30


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        canonical_json([value])


@pytest.mark.parametrize("value", [{1: "x"}, (1, 2), {"a": b"bytes"}, object()])
def test_values_that_are_not_json_are_refused(value: object) -> None:
    with pytest.raises(TypeError, match=r"not a JSON member name|not JSON data"):
        canonical_json(value)


@given(json_values)
def test_canonical_form_parses_back_to_the_same_value(value: Any) -> None:
    # A JSON reader takes every canonical number as a double, as JCS intends.
    assert json.loads(canonical_json(value), parse_int=float) == value


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.randoms())
def test_canonical_form_ignores_member_order(document: dict[str, Any], rnd: Any) -> None:
    items = list(document.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(document)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(st.characters(max_codepoint=0xD7FF)), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_without_floats_the_form_is_sorted_compact_json(value: Any) -> None:
    # Below the surrogates, UTF-16 order is code point order, which is what sort_keys uses.
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected.encode("utf-8")


# --- the record -------------------------------------------------------------------------


def test_a_successful_call() -> None:
    line = record(Succeeded(rows=3, returned_bytes=456))
    assert line == {
        "audit": "tools/call",
        "time": "2023-11-14T22:13:20.123456Z",
        "session": "0123456789abcdef",
        "request_id": 7,
        "client": {"name": "claude-code", "version": "2.1.0"},
        "tool": "read_only_sql",
        "arguments_sha256": hashlib.sha256(b'{"max_rows":5,"query":"SELECT 1"}').hexdigest(),
        "arguments_bytes": 33,
        "outcome": "ok",
        "duration_ms": 12.346,
        "rows": 3,
        "bytes": 456,
    }
    assert list(line) == list(record(Succeeded(rows=3, returned_bytes=456)))


@pytest.mark.parametrize(
    ("outcome", "members"),
    [
        (Succeeded(rows=None, returned_bytes=10), {"outcome": "ok", "bytes": 10}),
        (Refused(MCPErrorCode.QUERY_VIOLATION), {"outcome": "MCP_QUERY_VIOLATION"}),
        (Refused(MCPErrorCode.ACCESS_DENIED), {"outcome": "MCP_ACCESS_DENIED"}),
        (Refused(MCPErrorCode.VALIDATION_ERROR), {"outcome": "MCP_VALIDATION_ERROR"}),
        (Refused(MCPErrorCode.INTERNAL_ERROR), {"outcome": "MCP_INTERNAL_ERROR"}),
        (Refused(MCPErrorCode.EXECUTION_TIMEOUT), {"outcome": "timeout"}),
        (Crashed("9f86d081884c7d65"), {"outcome": "crash", "correlation_id": "9f86d081884c7d65"}),
        (CANCELLED, {"outcome": "cancelled"}),
    ],
)
def test_each_outcome(outcome: Outcome, members: dict[str, Any]) -> None:
    line = record(outcome)
    tail = {k: v for k, v in line.items() if k in {"outcome", "correlation_id", "rows", "bytes"}}
    assert tail == members


def test_without_client_info_the_client_is_null() -> None:
    assert record(client=None)["client"] is None


def test_string_ids_and_durations() -> None:
    line = record(request_id="req-\u2028-1", duration_s=0.0)
    assert line["request_id"] == "req-\u2028-1"
    assert line["duration_ms"] == 0.0


def test_digest_mode_records_no_argument_text() -> None:
    line = record(arguments={"query": "SELECT secret_column FROM t"})
    assert "arguments" not in line
    assert "secret_column" not in json.dumps(line)


def test_full_mode_copies_the_arguments() -> None:
    arguments = {"query": "SELECT 'a\nb' /* \u202e */", "max_rows": 2}
    line = record(arguments=arguments, arguments_mode="full")
    assert line["arguments"] == arguments
    assert line["arguments_sha256"] == hashlib.sha256(canonical_json(arguments)).hexdigest()


def test_full_mode_leaves_out_arguments_over_the_cap() -> None:
    at_cap = {"q": "x" * (MAX_RECORDED_ARGUMENTS_BYTES - len('{"q":""}'))}
    assert len(canonical_json(at_cap)) == MAX_RECORDED_ARGUMENTS_BYTES
    assert record(arguments=at_cap, arguments_mode="full")["arguments"] == at_cap
    over = {"q": at_cap["q"] + "x"}
    line = record(arguments=over, arguments_mode="full")
    assert "arguments" not in line
    assert line["arguments_bytes"] == MAX_RECORDED_ARGUMENTS_BYTES + 1


@given(st.text(), st.text(), st.dictionaries(st.text(), st.text(), max_size=3))
def test_any_client_text_stays_on_one_ascii_line(
    name: str, version: str, arguments: dict[str, str]
) -> None:
    line = record(client=ClientInfo.of(name, version), arguments=arguments, arguments_mode="full")
    assert line["client"] == {"name": name[:256], "version": version[:256]}
    assert line["arguments"] == arguments


def test_times_are_utc_with_microseconds() -> None:
    assert record(started_ns=0)["time"] == "1970-01-01T00:00:00.000000Z"
    assert record(started_ns=999_999)["time"] == "1970-01-01T00:00:00.000999Z"


@pytest.mark.parametrize(
    ("structured", "text", "expected"),
    [
        ({"row_count": 2, "rows": [[1], [2]]}, '{"row_count": 2}', Succeeded(2, 16)),
        ({"row_count": True}, "{}", Succeeded(None, 2)),
        ({"content": "\u00e9"}, '{"content": "\u00e9"}', Succeeded(None, 17)),
    ],
)
def test_results_are_measured(structured: dict[str, Any], text: str, expected: Succeeded) -> None:
    assert Succeeded.of(structured, text) == expected
