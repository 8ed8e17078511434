"""One session's audit trail: each call's record, written, and what a failed write means.

Rules:

1. One record per `tools/call` the session started, whatever its end: ok, a problem code,
   `timeout`, `cancelled` or `crash`. The session calls `record` exactly once per call,
   after the call's reply is decided and before it is written.
2. With `required`, each record is built and written before `record` returns, and a record
   that cannot be written makes `record` return False: the session sends `AUDIT_REFUSAL` in
   place of the reply, so no result ever leaves the server unrecorded.
3. Without it, a record never stops or delays a call. Records are taken down as the calls end
   and written together at most `BATCH_DELAY_S` later (or once `MAX_BATCH_RECORDS` wait, or
   when the session closes): one write for all of them, which halves what the trail costs
   each call, at the price of the records of the last few milliseconds if the process is
   killed outright. A record that cannot be written (or built: a bug must not end a session
   either) is dropped and counted: the first failure is reported once on stderr, with its
   reason, and the count when the session closes. Before the event loop runs (the shell's blocking
   phase), records taken down with `held` wait for the caller instead of a timer: it calls
   `write_waiting` by `written_by()`, before it waits for input, and when the phase ends.
4. The trail holds no secret: it sees calls and outcomes, never the settings.

Calling order: `clock()` when a call starts, `record(call, outcome, started)` when it ends;
`close()` once the session is over, which writes what is still waiting.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeAlias

from mcp_server_suite.audit.record import ArgumentsMode, Outcome, build_record
from mcp_server_suite.audit.sinks import RecordsLost
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem

if TYPE_CHECKING:
    from mcp_server_suite.audit.sinks import AuditSink
    from mcp_server_suite.core.server import StartCall

__all__ = ["AUDIT_REFUSAL", "BATCH_DELAY_S", "MAX_BATCH_RECORDS", "AuditTrail"]

logger = logging.getLogger(__name__)

# What a client gets, in-band, for a call whose record could not be written while
# MCP_AUDIT_REQUIRED=true: the tool ran, but its result is withheld. A full disk or a
# restarted journal can recover, so the call may be retried.
AUDIT_REFUSAL: Final = Problem.of(
    MCPErrorCode.INTERNAL_ERROR,
    "The call could not be recorded in the audit trail, so its result is withheld; "
    "it may succeed if retried later.",
    metadata={"retryable": True, "audit": "unavailable"},
)

# Records of calls that end within 5 ms of each other are built and written together: about
# half the CPU per call of writing each one alone, inside the running server
# (benchmarks/bench_core.py), while a process killed outright loses at most 5 ms of them.
BATCH_DELAY_S: Final = 0.005

# A batch is written at once when this many records wait: 64 records of the largest kind
# (arguments copied in full, 64 KiB each) stay below 5 MiB in memory.
MAX_BATCH_RECORDS: Final = 64

# 64 random bits tell sessions apart in a shared log, as the correlation ids do for crashes.
_SESSION_ID_BYTES: Final = 8

# A call taken down for the next batch: the call, its outcome, its duration and when it ended.
_Pending: TypeAlias = tuple["StartCall", Outcome, float, int]


class AuditTrail:
    """The records of one session.

    Args:
        sink: Where records go; None records nothing (`MCP_AUDIT_LOG=off`).
        arguments: `digest` or `full` (`MCP_AUDIT_ARGUMENTS`).
        required: Write each record before its reply, and refuse to answer calls that cannot
            be recorded (`MCP_AUDIT_REQUIRED`).
        wall_clock_ns: The clock of the records' `time`; `time.time_ns` by default.
        clock: The monotonic clock of their durations; `time.perf_counter` by default.
    """

    refusal: Final = AUDIT_REFUSAL

    def __init__(
        self,
        sink: AuditSink | None,
        *,
        arguments: ArgumentsMode = "digest",
        required: bool = False,
        wall_clock_ns: Callable[[], int] = time.time_ns,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._sink = sink
        self._arguments: Final = arguments
        self._required: Final = required
        self._wall_clock_ns: Final = wall_clock_ns
        self.clock: Final = clock
        self.session: Final = os.urandom(_SESSION_ID_BYTES).hex()
        self._reported = False
        # Records that could not be written (rule 3).
        self.dropped = 0
        self._pending: list[_Pending] = []
        self._timer: asyncio.TimerHandle | None = None
        # When the records held for the blocking phase must be written (`clock()` time).
        self._due: float | None = None

    @property
    def sink(self) -> AuditSink | None:
        """The destination, or None when nothing is recorded."""
        return self._sink

    def record(
        self, call: StartCall, outcome: Outcome, started: float | None, *, held: bool = False
    ) -> bool:
        """Take down the record of one finished call.

        Args:
            call: The call, as the dispatcher started it.
            outcome: How it ended.
            started: `clock()` when it started, or None for a call cancelled before it ran.
            held: The caller runs no event loop and writes the waiting records itself, by
                `written_by()` (rule 3).

        Returns:
            Whether the call's reply may be sent: always, unless the trail is `required` and
            the record could not be written.
        """
        if self._sink is None:
            return True
        now = self.clock()
        duration = 0.0 if started is None else max(0.0, now - started)
        self._pending.append((call, outcome, duration, self._wall_clock_ns()))
        if self._required or len(self._pending) >= MAX_BATCH_RECORDS:
            return self._flush() or not self._required
        if held:
            if self._due is None:
                self._due = now + BATCH_DELAY_S
            return True
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # Outside an event loop nothing could flush later: now.
                self._flush()
                return True
            self._timer = loop.call_later(BATCH_DELAY_S, self._flush)
        return True

    def written_by(self) -> float | None:
        """When the records held for the caller are due (`clock()` time); None if none wait."""
        return self._due

    def write_waiting(self) -> None:
        """Write every record still waiting, now."""
        self._flush()

    def close(self) -> None:
        """Write what is still waiting and release the sink."""
        if self._sink is not None:
            self._flush()
            self._sink.close()
            if self.dropped:
                logger.error(
                    "audit trail: %d record%s of this session could not be written to %s",
                    self.dropped,
                    "s" * (self.dropped != 1),
                    self._sink.description,
                )

    def _flush(self) -> bool:
        # Returns whether every waiting record was written.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due = None
        if self._sink is None or not self._pending:
            return True
        pending, self._pending = self._pending, []
        try:
            lines = [
                build_record(
                    session=self.session,
                    started_ns=ended_ns - int(duration * 1e9),
                    duration_s=duration,
                    request_id=call.request_id,
                    client=call.client,
                    tool=call.tool.description.name,
                    arguments=call.arguments,
                    arguments_mode=self._arguments,
                    outcome=outcome,
                )
                for call, outcome, duration, ended_ns in pending
            ]
            self._sink.write_batch(lines)
        except RecordsLost as lost:
            self.dropped += len(pending) - lost.written
            self._report(self._sink, lost.reason)
            return False
        except OSError as exc:  # A sink outside this package: its error, by name.
            self.dropped += len(pending)
            self._report(self._sink, errno.errorcode.get(exc.errno or 0, "error"))
            return False
        except Exception:  # A bug here must not end the session (rule 3).
            self.dropped += len(pending)
            logger.exception("audit trail: a record could not be built")
            self._report(self._sink, "a bug in the record builder")
            return False
        return True

    def _report(self, sink: AuditSink, reason: str) -> None:
        if self._reported:
            return
        self._reported = True
        logger.error(
            "audit trail: a record could not be written to %s (%s); %s",
            sink.description,
            reason,
            "calls that cannot be recorded are refused (MCP_AUDIT_REQUIRED)"
            if self._required
            else "calls go on unrecorded; the records lost are counted",
        )
