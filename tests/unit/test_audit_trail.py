"""The audit trail of a session: one record per call, and what a failed write means."""

import asyncio
import errno
import json
import logging
from typing import Any

import pytest

from mcp_server_suite.audit.record import CANCELLED, Refused, Succeeded
from mcp_server_suite.audit.sinks import _JOURNAL_FULL, RecordsLost
from mcp_server_suite.audit.trail import (
    AUDIT_REFUSAL,
    BATCH_DELAY_S,
    MAX_BATCH_RECORDS,
    AuditTrail,
)
from mcp_server_suite.core.registry import RegisteredTool, ToolSpec
from mcp_server_suite.core.server import ClientInfo, StartCall
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.problems import MCPErrorCode


class Params(StrictModel):
    text: str


async def run(params: Params) -> Params:
    return params


TOOL = RegisteredTool.loaded(
    ToolSpec(
        name="echo",
        title="Echo",
        description="Echo text.",
        params_model=Params,
        result_model=Params,
        run=run,
    )
)


class MemorySink:
    description = "memory"

    def __init__(self, fail: int | None = None) -> None:
        self.lines: list[bytes] = []
        self.batches: list[int] = []
        self.fail = fail
        self.closed = False

    def write(self, record: bytes) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[bytes]) -> None:
        if self.fail is not None:
            raise OSError(self.fail, "fails")
        self.batches.append(len(records))
        self.lines.extend(records)

    def close(self) -> None:
        self.closed = True


def call(request_id: int = 1, **arguments: Any) -> StartCall:
    return StartCall(request_id, TOOL, arguments or {"text": "hi"}, ClientInfo.of("c", "1"))


def records(sink: MemorySink) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sink.lines]


class FakeClocks:
    def __init__(self) -> None:
        self.monotonic = 100.0
        self.wall_ns = 1_700_000_000_000_000_000

    def trail(self, sink: MemorySink, **options: Any) -> AuditTrail:
        return AuditTrail(
            sink, wall_clock_ns=lambda: self.wall_ns, clock=lambda: self.monotonic, **options
        )


def test_each_call_gets_one_record_with_its_start_time_and_duration() -> None:
    sink, clocks = MemorySink(), FakeClocks()
    trail = clocks.trail(sink)
    started = trail.clock()
    clocks.monotonic += 0.25
    clocks.wall_ns += 250_000_000
    assert trail.record(call(3), Succeeded(None, 12), started) is True
    (line,) = records(sink)
    assert line["request_id"] == 3
    assert line["tool"] == "echo"
    assert line["client"] == {"name": "c", "version": "1"}
    assert line["time"] == "2023-11-14T22:13:20.000000Z"
    assert line["duration_ms"] == 250.0
    assert line["session"] == trail.session
    assert len(trail.session) == 16
    assert "arguments" not in line


def test_a_call_cancelled_before_it_ran_lasted_no_time() -> None:
    sink, clocks = MemorySink(), FakeClocks()
    assert clocks.trail(sink).record(call(), CANCELLED, None) is True
    assert records(sink)[0]["duration_ms"] == 0.0
    assert records(sink)[0]["outcome"] == "cancelled"


def test_full_mode_copies_the_arguments() -> None:
    sink = MemorySink()
    AuditTrail(sink, arguments="full").record(call(text="SELECT 1"), CANCELLED, None)
    assert records(sink)[0]["arguments"] == {"text": "SELECT 1"}


def test_sessions_have_their_own_ids() -> None:
    assert AuditTrail(MemorySink()).session != AuditTrail(MemorySink()).session


def test_off_records_nothing_and_never_refuses() -> None:
    trail = AuditTrail(None, required=True)
    assert trail.sink is None
    assert trail.record(call(), CANCELLED, trail.clock()) is True
    trail.close()


def test_a_failed_write_is_reported_once_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = MemorySink(fail=errno.ENOSPC)
    trail = AuditTrail(sink)
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        assert trail.record(call(1), Refused(MCPErrorCode.ACCESS_DENIED), None) is True
        assert trail.record(call(2), CANCELLED, None) is True
    (message,) = [r.getMessage() for r in caplog.records]
    assert "could not be written to memory (ENOSPC)" in message
    assert "the records lost are counted" in message
    # Dropped and counted; the count is reported when the session closes.
    assert trail.dropped == 2
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        trail.close()
    assert caplog.records[-1].getMessage() == (
        "audit trail: 2 records of this session could not be written to memory"
    )


def test_records_a_sink_wrote_before_it_failed_are_not_counted_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The journal sends a datagram per record: the first of three went, then its queue was
    # full. The report names why, as the sink explains it.
    sink = MemorySink()

    def two_lost(records: list[bytes]) -> None:
        sink.lines.extend(records[:1])
        raise RecordsLost(OSError(errno.EAGAIN, _JOURNAL_FULL), written=1)

    sink.write_batch = two_lost  # type: ignore[method-assign]  # The failing journal.
    trail = AuditTrail(sink)
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        for request_id in range(3):
            trail.record(call(request_id), CANCELLED, None, held=True)
        trail.close()
    assert trail.dropped == 2
    assert (
        "(EAGAIN: the journal's queue is full: journald is not reading)"
        in caplog.records[0].getMessage()
    )
    assert "2 records of this session" in caplog.records[-1].getMessage()


def test_a_session_that_lost_one_record_says_so_in_the_singular(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trail = AuditTrail(MemorySink(fail=errno.EIO))
    trail.record(call(), CANCELLED, None)
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        trail.close()
    assert "1 record of this session could not be written" in caplog.text


def test_a_required_trail_refuses_calls_it_cannot_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = MemorySink(fail=errno.EIO)
    trail = AuditTrail(sink, required=True)
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        assert trail.record(call(1), Succeeded(1, 2), None) is False
        assert trail.record(call(2), Succeeded(1, 2), None) is False
        sink.fail = None
        assert trail.record(call(3), Succeeded(1, 2), None) is True
    assert [r["request_id"] for r in records(sink)] == [3]
    (message,) = [r.getMessage() for r in caplog.records]
    assert "(EIO)" in message
    assert "refused (MCP_AUDIT_REQUIRED)" in message
    assert trail.refusal is AUDIT_REFUSAL


def test_an_unknown_errno_is_still_reported(caplog: pytest.LogCaptureFixture) -> None:
    trail = AuditTrail(MemorySink(fail=0))
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        trail.record(call(), CANCELLED, None)
    assert "(error)" in caplog.text


def test_the_refusal_is_a_retryable_internal_error() -> None:
    assert AUDIT_REFUSAL.code is MCPErrorCode.INTERNAL_ERROR
    assert AUDIT_REFUSAL.metadata == {"retryable": True, "audit": "unavailable"}
    assert "withheld" in AUDIT_REFUSAL.detail


def test_close_closes_the_sink() -> None:
    sink = MemorySink()
    AuditTrail(sink).close()
    assert sink.closed


def test_a_record_that_cannot_be_built_is_a_failed_write(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**members: Any) -> bytes:
        raise TypeError("not JSON data: set")

    monkeypatch.setattr("mcp_server_suite.audit.trail.build_record", broken)
    sink = MemorySink()
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        assert AuditTrail(sink).record(call(), CANCELLED, None) is True
        assert AuditTrail(sink, required=True).record(call(), CANCELLED, None) is False
    assert sink.lines == []
    assert "a record could not be built" in caplog.text
    assert "(a bug in the record builder)" in caplog.text


# --- batches, inside the event loop --------------------------------------------------------


async def test_records_of_calls_ending_together_are_written_together() -> None:
    sink = MemorySink()
    trail = AuditTrail(sink)
    for request_id in range(3):
        assert trail.record(call(request_id), CANCELLED, None) is True
    assert sink.lines == []  # taken down, not written yet
    await asyncio.sleep(BATCH_DELAY_S * 4)
    assert sink.batches == [3]
    assert [r["request_id"] for r in records(sink)] == [0, 1, 2]
    trail.record(call(3), CANCELLED, None)
    await asyncio.sleep(BATCH_DELAY_S * 4)
    assert sink.batches == [3, 1]


async def test_a_full_batch_is_written_at_once() -> None:
    sink = MemorySink()
    trail = AuditTrail(sink)
    for request_id in range(MAX_BATCH_RECORDS + 1):
        trail.record(call(request_id), CANCELLED, None)
    assert sink.batches == [MAX_BATCH_RECORDS]
    trail.close()
    assert sink.batches == [MAX_BATCH_RECORDS, 1]
    assert sink.closed


async def test_close_writes_what_waits_and_cancels_the_timer() -> None:
    sink = MemorySink()
    trail = AuditTrail(sink)
    trail.record(call(1), CANCELLED, None)
    trail.close()
    assert sink.batches == [1]
    await asyncio.sleep(BATCH_DELAY_S * 4)
    assert sink.batches == [1]


async def test_a_required_trail_writes_each_record_before_it_returns() -> None:
    sink = MemorySink()
    trail = AuditTrail(sink, required=True)
    assert trail.record(call(1), CANCELLED, None) is True
    assert sink.batches == [1]
    sink.fail = errno.ENOSPC
    assert trail.record(call(2), CANCELLED, None) is False


async def test_a_failed_batch_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    sink = MemorySink(fail=errno.EIO)
    trail = AuditTrail(sink)
    with caplog.at_level(logging.ERROR, "mcp_server_suite.audit"):
        trail.record(call(1), CANCELLED, None)
        await asyncio.sleep(BATCH_DELAY_S * 4)
        trail.record(call(2), CANCELLED, None)
        trail.close()
    assert caplog.text.count("could not be written to memory (EIO)") == 1
