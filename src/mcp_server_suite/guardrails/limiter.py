"""The concurrency limiter: a fixed number of slots, granted first come, first served.

Rules:

1. At most `slots` calls run at once. A call that finds no free slot waits in a FIFO queue
   for at most its timeout, then is refused with a retryable problem; a timeout of 0
   refuses at once.
2. The queue itself is bounded (`max_waiters`): a flood of calls is refused immediately
   instead of holding every flooded call's arguments in memory.
3. A slot is never lost. A waiter cancelled or timed out at the moment its slot was
   granted passes the slot on; a slot freed with nobody waiting returns to the pool.
"""

import asyncio
from collections import deque
from types import TracebackType
from typing import Final

from mcp_server_suite.schemas.errors import PolicyViolation
from mcp_server_suite.schemas.problems import MCPErrorCode

__all__ = ["MAX_IN_FLIGHT", "QUEUED_CALLS_PER_SLOT", "ConcurrencyLimiter"]

# The design document's default: 16 concurrent calls, well above what one model drives and
# matched by the worker threads that file reads and CPU sampling use.
MAX_IN_FLIGHT: Final = 16

# Four queued calls per slot absorb a client's burst while bounding what queued arguments
# (up to one frame each) can pin in memory.
QUEUED_CALLS_PER_SLOT: Final = 4


class ConcurrencyLimiter:
    """A FIFO semaphore with a bounded wait and a bounded queue.

    Args:
        slots: How many calls may hold a slot at once.
        max_waiters: How many calls may wait for a slot; more are refused at once.
    """

    def __init__(self, slots: int = MAX_IN_FLIGHT, *, max_waiters: int | None = None) -> None:
        if slots < 1:
            raise ValueError("slots must be positive")
        self._slots: Final = slots
        self._free = slots
        self._max_waiters: Final = (
            slots * QUEUED_CALLS_PER_SLOT if max_waiters is None else max_waiters
        )
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def slots(self) -> int:
        """How many calls may hold a slot at once."""
        return self._slots

    @property
    def in_use(self) -> int:
        """Slots currently held."""
        return self._slots - self._free

    @property
    def waiting(self) -> int:
        """Calls currently queued for a slot."""
        return len(self._waiters)

    def slot(self, timeout: float) -> "_Slot":
        """Hold one slot for the body of `async with`.

        Args:
            timeout: The longest wait for a slot, in seconds; 0 means do not wait.

        Returns:
            The async context manager.

        Raises:
            PolicyViolation: On entry, when no slot came free in time or the queue is full.
                The problem is an internal error with `metadata.retryable: true`.
        """
        return _Slot(self, timeout)

    async def acquire(self, timeout: float) -> None:
        """Take a slot, waiting in line for at most `timeout` seconds.

        Raises:
            PolicyViolation: No slot came free in time, or the queue is full.
        """
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        if timeout <= 0 or len(self._waiters) >= self._max_waiters:
            raise self._busy("all concurrency slots are in use")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # The slot was granted just as the wait ended: hand it on, never drop it.
                self.release()
            elif waiter in self._waiters:
                # A release may already have skipped past this cancelled waiter.
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise self._busy(f"no concurrency slot came free within {timeout:g} s") from None
            raise

    def release(self) -> None:
        """Return a slot: to the first waiter in line, or to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    def _busy(self, reason: str) -> PolicyViolation:
        return PolicyViolation(
            f"The server is busy: {reason}. Retry the call shortly.",
            code=MCPErrorCode.INTERNAL_ERROR,
            metadata={"retryable": True, "max_concurrent_calls": self._slots},
        )


class _Slot:
    # A class rather than @asynccontextmanager: it runs on every call, and the generator
    # machinery costs more than taking the slot.
    __slots__ = ("_limiter", "_timeout")

    def __init__(self, limiter: ConcurrencyLimiter, timeout: float) -> None:
        self._limiter = limiter
        self._timeout = timeout

    async def __aenter__(self) -> None:
        await self._limiter.acquire(self._timeout)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._limiter.release()
