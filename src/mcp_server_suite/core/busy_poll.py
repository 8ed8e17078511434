"""Waiting awake for a moment before sleeping: what the shell does before every blocking wait.

The inline phase uses `ready_within`; the session's event loop, `core.event_loop`. This
module is imported at start-up, so it imports nothing the handshake does not need.

Rules:

1. Before a wait that may sleep (a blocking read in the inline phase, the event loop's
   `select`), the shell looks for input without sleeping for up to `BUSY_POLL_S`, and sleeps
   only if none came. A process asleep costs a wake-up on the scheduler's slow path when its
   input arrives: a cross-CPU interrupt, on a virtual machine an exit to the hypervisor,
   which takes longer than a quick client's turn-around between an answer and its next
   request, or a database's answer to a short query.
2. The cost is bounded: at most `BUSY_POLL_S` of CPU time per wait, and only when the
   process was about to sleep. A client or a database that goes quiet costs half a
   millisecond once, then nothing.
3. Looking never changes what is read, written or when a timer fires: a wait for a timer
   due sooner than `BUSY_POLL_S` polls only until it is due, and a signal is handled as it
   would be during the sleep.
"""

import time
from collections.abc import Callable
from typing import Final

__all__ = ["BUSY_POLL_S", "ready_within"]

# Half a millisecond: longer than the two waits of a busy session, a client that sends its
# next request as soon as it has read an answer (tens of microseconds) and a local
# PostgreSQL answering a short read's round trip (0.2 to 0.4 ms, `benchmarks/bench_sql.py`),
# and shorter than anything a person or a model would notice, whatever the machine. A tenth
# of a millisecond covers the first alone: an SQL call would sleep through its answer.
BUSY_POLL_S: Final = 500e-6


def ready_within(ready: Callable[[], bool], seconds: float = BUSY_POLL_S) -> bool:
    """Ask `ready` (which must not block) again and again for up to `seconds`.

    Returns:
        Whether it said yes before the time was up.
    """
    ends = time.perf_counter() + seconds
    while not ready():
        if time.perf_counter() >= ends:
            return False
    return True
