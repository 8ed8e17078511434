"""Worker threads for the blocking part of a tool call (file reads, CPU sampling).

`asyncio.to_thread` hands work over through `concurrent.futures`: a context copy, an
executor lock, a work item, a second future chained to an asyncio future. For a read of a
small file that hand-off costs more than the read itself, so tools use `run_blocking`, which
puts the call on a queue that idle workers wait on and resolves an asyncio future directly.

Rules:

1. At most `limit` workers ever exist: the number of concurrency slots, set at start-up with
   `set_worker_limit`. A worker starts when a call is queued and none is idle; at the limit,
   calls wait in the queue. Python cannot stop a thread, so a call its deadline abandoned
   keeps its worker busy until it returns; the calls behind it queue for a worker and meet
   their own deadlines there, instead of each starting a thread of its own (with a 0.5 s
   deadline on 2 s calls that grew a pool to 65 threads for 16 slots).
2. A queued call whose caller has gone (cancelled, or past its deadline) before a worker takes
   it is dropped without running.
3. Workers are daemon threads: a thread still inside a blocking call (a CPU sample, a read
   from a hung file system) never keeps the process alive after the session has ended.
   `stop_workers` ends the idle ones when a session ends, so no thread outlives it for
   longer than its current call.
4. Cancelling the awaiting task does not interrupt the thread, but its result is dropped when
   it arrives, and a closed event loop is never called.
5. A forked child starts with an empty pool: it has none of its parent's threads.
6. A thread that cannot start (a pids cgroup limit, `RLIMIT_NPROC`, `RLIMIT_AS` or memory
   pressure: `RuntimeError: can't start new thread`) is not counted: the next call tries
   again, so the pool works as soon as threads can start. Meanwhile a call that no worker
   can take is refused at once with `WorkerUnavailable`, a retryable in-band problem,
   instead of waiting in the queue for its deadline; with workers alive it waits for them.
   The first failure of a run of them is logged, and the first start after it.
"""

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from mcp_server_suite.guardrails.limiter import MAX_IN_FLIGHT
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode

__all__ = [
    "WorkerUnavailable",
    "run_blocking",
    "set_worker_limit",
    "stop_workers",
    "worker_count",
]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]] | None


class WorkerUnavailable(ToolFailure):
    """No worker thread could take the call: none could be started, and none exists (rule 6).

    The system refused the process another thread; the limit may lift (another process
    ends, an operator raises it), so the call may be retried.
    """

    default_code = MCPErrorCode.INTERNAL_ERROR

    def __init__(self) -> None:
        super().__init__(
            "The server could not start a thread to run this call: the system refused it "
            "one (a limit on threads, processes or memory). Retry later.",
            metadata={"retryable": True},
        )


class _Generation:
    # The workers started since the last `stop`, and the queue they share: a worker stopped
    # while busy keeps its own queue, so it can never take a job or a stop marker of the
    # workers started after it.
    __slots__ = ("idle", "jobs", "queued", "threads")

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        # Both change under the pool's lock: workers waiting for a job, jobs not yet taken.
        self.idle = 0
        self.queued = 0


class _WorkerPool:
    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self.limit = limit
        self._generation = _Generation()
        # Whether the last attempt to start a worker failed (rule 6, for the log).
        self._starts_failing = False

    @property
    def size(self) -> int:
        return len(self._generation.threads)

    def submit(self, loop: asyncio.AbstractEventLoop, call: Callable[[], T]) -> "asyncio.Future[T]":
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            generation = self._generation
            generation.queued += 1
            wanted = generation.queued > generation.idle and len(generation.threads) < self.limit
            if wanted and not self._start_worker(generation) and not generation.threads:
                # Nobody could ever take the job: refused now, not at its deadline.
                generation.queued -= 1
                future.set_exception(WorkerUnavailable())
                return future
        generation.jobs.put((loop, future, call))
        return future

    def _start_worker(self, generation: _Generation) -> bool:
        # Called with the lock held; whether a new worker runs. One that could not start is
        # not counted, so the next call tries again (rule 6).
        thread = threading.Thread(
            target=self._work, args=(generation,), name="tool-worker", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:
            if not self._starts_failing:
                self._starts_failing = True
                logger.warning(
                    "could not start a worker thread (%s): calls that need one wait for the "
                    "workers running, or are refused while there are none",
                    exc,
                )
            return False
        if self._starts_failing:
            self._starts_failing = False
            logger.warning("worker threads start again")
        generation.threads.append(thread)
        return True

    def forget_after_fork(self) -> None:
        # A forked child has none of its parent's threads: it starts from an empty pool.
        self._lock = threading.Lock()
        self._generation = _Generation()

    def stop(self, timeout: float) -> None:
        # One stop marker per worker, behind the jobs still queued (whose callers are gone,
        # so they are dropped unrun); later calls start a new generation of workers.
        with self._lock:
            generation, self._generation = self._generation, _Generation()
        for _ in generation.threads:
            generation.jobs.put(None)
        for thread in generation.threads:
            thread.join(timeout)

    def _work(self, generation: _Generation) -> None:
        while True:
            with self._lock:
                generation.idle += 1
            job = generation.jobs.get()
            with self._lock:
                generation.idle -= 1
                if job is not None:
                    generation.queued -= 1
            if job is None:
                return
            loop, future, call = job
            if future.done():
                # Cancelled while it waited: nobody wants the result (rule 2). Reading the
                # state from this thread is a single attribute load; a stale answer only
                # means the call runs and its result is dropped.
                continue
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


# Until start-up says otherwise, the limiter's default number of slots.
_POOL: Final = _WorkerPool(MAX_IN_FLIGHT)
os.register_at_fork(after_in_child=_POOL.forget_after_fork)

# How long `stop_workers` waits for each worker; an idle one ends at once, and a busy one is
# a daemon thread that need not be waited for.
STOP_WAIT_S: Final = 0.1


def set_worker_limit(limit: int) -> None:
    """Allow at most `limit` worker threads: the number of concurrency slots.

    Raises:
        ValueError: `limit` is not positive.
    """
    if limit < 1:
        raise ValueError("the worker limit must be positive")
    _POOL.limit = limit


def worker_count() -> int:
    """How many worker threads exist now."""
    return _POOL.size


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
