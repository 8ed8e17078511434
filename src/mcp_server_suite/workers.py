"""Worker threads for the blocking part of a tool call (file reads, CPU sampling).

`asyncio.to_thread` hands work over through `concurrent.futures`: a context copy, an
executor lock, a work item, a second future chained to an asyncio future. For a read of a
small file that hand-off costs more than the read itself, so tools use `run_blocking`, which
puts the call on a queue that idle workers wait on and resolves an asyncio future directly.

Rules:

1. Workers start on demand, whenever more calls wait than workers idle, up to `MAX_WORKERS`. The
   concurrency limiter already bounds how many calls run at once, so in practice the pool
   never grows past the number of concurrency slots.
2. Workers are daemon threads: a thread still inside a blocking call (a CPU sample, a read
   from a slow file system) never keeps the process alive after the session has ended.
   `stop_workers` ends the idle ones when a session ends, so no thread outlives it for
   longer than its current call.
3. Cancelling the awaiting task does not interrupt the thread (Python cannot), but its
   result is dropped when it arrives, and a closed event loop is never called.
"""

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

__all__ = ["MAX_WORKERS", "run_blocking", "stop_workers"]

P = ParamSpec("P")
T = TypeVar("T")

# The largest value MCP_MAX_CONCURRENT_TOOLS accepts: one worker per concurrency slot.
MAX_WORKERS: Final = 256

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]] | None


class _WorkerPool:
    def __init__(self, max_workers: int) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._max_workers = max_workers
        self._threads: list[threading.Thread] = []
        # Both change under the lock: workers waiting for a job, and jobs not yet taken.
        self._idle = 0
        self._waiting = 0

    def submit(self, loop: asyncio.AbstractEventLoop, call: Callable[[], T]) -> "asyncio.Future[T]":
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._work, name="tool-worker", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put((loop, future, call))
        return future

    def stop(self, timeout: float) -> None:
        # One stop marker per worker: each worker takes one job at most before it sees its
        # marker, and idle workers see theirs at once.
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            with self._lock:
                self._waiting -= 1
            loop, future, call = job
            try:
                result = call()
            except BaseException as exc:  # noqa: BLE001  # Handed to the awaiting task.
                _deliver(loop, future, None, exc)
            else:
                _deliver(loop, future, result, None)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: "asyncio.Future[Any]",
    result: object,
    error: BaseException | None,
) -> None:
    # RuntimeError: the event loop closed while the call ran, and nobody waits any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: "asyncio.Future[Any]", result: object, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_POOL: Final = _WorkerPool(MAX_WORKERS)

# How long `stop_workers` waits for each worker; an idle one ends at once, and a busy one is
# a daemon thread that need not be waited for.
STOP_WAIT_S: Final = 0.1


def stop_workers() -> None:
    """End the worker threads: idle ones at once, busy ones after their current call."""
    _POOL.stop(STOP_WAIT_S)


async def run_blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking function in a worker thread and wait for its result.

    Args:
        function: The blocking callable.
        *args: Its positional arguments.
        **kwargs: Its keyword arguments.

    Returns:
        What `function` returned.

    Raises:
        Exception: Whatever `function` raised, re-raised in the awaiting task.
    """
    loop = asyncio.get_running_loop()
    return await _POOL.submit(loop, lambda: function(*args, **kwargs))
