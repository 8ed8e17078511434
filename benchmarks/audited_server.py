"""This server, with the CPU time its audit trail takes measured from inside.

`bench_core.py` runs it beside the plain server to weigh the trail where it runs: in the
event loop, between the calls, with the caches as the calls leave them, which costs more than
the same code in a tight loop. `AuditTrail.record` (which takes a call down) and
`AuditTrail._flush` (which builds and writes the waiting records) are wrapped to add up the
thread CPU time they take (`time.thread_time_ns`, whose own cost is measured with the trail
off and subtracted by the caller). On SIGUSR1 the running totals go to stderr as one line,
so the caller can read them between workloads:

    AUDIT-CPU <nanoseconds> <records>

Usage: python benchmarks/audited_server.py   (configured by MCP_* variables, as the server)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from mcp_server_suite.__main__ import main
from mcp_server_suite.audit import trail

_spent = [0, 0]
_record = trail.AuditTrail.record
_flush = trail.AuditTrail._flush


_inside_record = [False]


def _timed_record(self: trail.AuditTrail, *args: Any, **kwargs: Any) -> bool:
    started = time.thread_time_ns()
    _inside_record[0] = True
    try:
        recorded = _record(self, *args, **kwargs)
    finally:
        _inside_record[0] = False
    _spent[0] += time.thread_time_ns() - started
    _spent[1] += 1
    return recorded


def _timed_flush(self: trail.AuditTrail) -> bool:
    if _inside_record[0]:  # counted by the record() around it
        return _flush(self)
    started = time.thread_time_ns()
    written = _flush(self)
    _spent[0] += time.thread_time_ns() - started
    return written


def _report(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"AUDIT-CPU {_spent[0]} {_spent[1]}\n".encode())


trail.AuditTrail.record = _timed_record  # type: ignore[method-assign]  # The measurement.
trail.AuditTrail._flush = _timed_flush  # type: ignore[method-assign]  # The measurement.
signal.signal(signal.SIGUSR1, _report)

if __name__ == "__main__":
    sys.exit(main())
