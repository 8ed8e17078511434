"""One session's audit trail: each call's record, written, and what a failed write means.

Rules:

1. One record per `tools/call` the session started, whatever its end: ok, a problem code,
   `timeout`, `cancelled` or `crash`. The session calls `record` exactly once per call,
   after the call's reply is decided and before it is written.
2. A record that cannot be written (or built: a bug must not end a session either) never
   stops a call: the failure is reported once on stderr and the call's reply goes out as
   decided. With `required`, `record` returns False
   instead, and the session sends `AUDIT_REFUSAL` in place of the reply, so no result ever
   leaves the server unrecorded.
3. The trail holds no secret: it sees calls and outcomes, never the settings.

Calling order: `clock()` when a call starts, `record(call, outcome, started)` when it ends;
`close()` once the session is over.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from mcp_server_suite.audit.record import ArgumentsMode, Outcome, build_record
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem

if TYPE_CHECKING:
    from mcp_server_suite.audit.sinks import AuditSink
    from mcp_server_suite.core.server import StartCall

__all__ = ["AUDIT_REFUSAL", "AuditTrail"]

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

# 64 random bits tell sessions apart in a shared log, as the correlation ids do for crashes.
_SESSION_ID_BYTES: Final = 8


class AuditTrail:
    """The records of one session.

    Args:
        sink: Where records go; None records nothing (`MCP_AUDIT_LOG=off`).
        arguments: `digest` or `full` (`MCP_AUDIT_ARGUMENTS`).
        required: Refuse to answer calls that cannot be recorded (`MCP_AUDIT_REQUIRED`).
        wall_clock_ns: The clock of the records' `time`; `time.time_ns` by default.
        clock: The monotonic clock of their durations; `time.perf_counter` by default.
    """

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

    refusal: Final = AUDIT_REFUSAL

    @property
    def sink(self) -> AuditSink | None:
        """The destination, or None when nothing is recorded."""
        return self._sink

    def record(self, call: StartCall, outcome: Outcome, started: float | None) -> bool:
        """Write the record of one finished call.

        Args:
            call: The call, as the dispatcher started it.
            outcome: How it ended.
            started: `clock()` when it started, or None for a call cancelled before it ran.

        Returns:
            Whether the call's reply may be sent: True when the record was written, or when
            recording is not required.
        """
        if self._sink is None:
            return True
        duration = 0.0 if started is None else max(0.0, self.clock() - started)
        try:
            line = build_record(
                session=self.session,
                started_ns=self._wall_clock_ns() - int(duration * 1e9),
                duration_s=duration,
                request_id=call.request_id,
                client=call.client,
                tool=call.tool.description.name,
                arguments=call.arguments,
                arguments_mode=self._arguments,
                outcome=outcome,
            )
            self._sink.write(line)
        except OSError as exc:
            self._report(self._sink, errno.errorcode.get(exc.errno or 0, "error"))
            return not self._required
        except Exception:  # A bug here must not end the session (rule 2).
            logger.exception("audit trail: a record could not be built")
            self._report(self._sink, "a bug in the record builder")
            return not self._required
        return True

    def close(self) -> None:
        """Release the sink."""
        if self._sink is not None:
            self._sink.close()

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
            else "calls go on unrecorded, and further failures are not reported",
        )
