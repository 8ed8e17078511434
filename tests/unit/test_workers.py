"""Worker threads: results, errors, cancellation, a closed loop, stopping, and the limit."""

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import pytest

from mcp_server_suite.guardrails.limiter import MAX_IN_FLIGHT
from mcp_server_suite.workers import (
    WorkerUnavailable,
    run_blocking,
    set_worker_limit,
    stop_workers,
    worker_count,
)


async def test_result_and_arguments_come_back() -> None:
    def add(a: int, b: int = 0) -> int:
        return a + b

    assert await run_blocking(add, 2, b=3) == 5


async def test_work_runs_off_the_event_loop_thread() -> None:
    loop_thread = threading.get_ident()
    assert await run_blocking(threading.get_ident) != loop_thread


async def test_exceptions_are_raised_in_the_awaiting_task() -> None:
    def fail() -> None:
        raise PermissionError("denied")

    with pytest.raises(PermissionError, match="denied"):
        await run_blocking(fail)


async def test_concurrent_calls_get_their_own_workers() -> None:
    barrier = threading.Barrier(4, timeout=5)
    results = await asyncio.gather(*(run_blocking(barrier.wait) for _ in range(4)))
    assert sorted(results) == [0, 1, 2, 3]


async def test_a_cancelled_call_drops_its_late_result() -> None:
    release = threading.Event()
    task = asyncio.create_task(run_blocking(release.wait, 5))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    # The worker finishes after the cancellation; the loop must not fail on the result.
    assert await run_blocking(lambda: "still working") == "still working"


def test_a_result_for_a_closed_loop_is_dropped() -> None:
    started = threading.Event()
    release = threading.Event()

    async def start() -> None:
        def wait() -> None:
            started.set()
            release.wait(5)

        task = asyncio.ensure_future(run_blocking(wait))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(start())
    # The loop is closed; the worker's delivery must be dropped quietly.
    release.set()
    time.sleep(0.1)
    assert asyncio.run(run_blocking(lambda: 1)) == 1


def test_stop_ends_idle_workers() -> None:
    asyncio.run(run_blocking(lambda: None))
    assert any(thread.name == "tool-worker" for thread in threading.enumerate())
    stop_workers()
    assert not any(thread.name == "tool-worker" for thread in threading.enumerate())
    # The pool starts workers again on demand.
    assert asyncio.run(run_blocking(lambda: 7)) == 7


# --- the pool's limit ----------------------------------------------------------------------


@pytest.fixture
def limit() -> Iterator[int]:
    # A small limit for the test; the default comes back afterwards.
    set_worker_limit(3)
    stop_workers()
    yield 3
    stop_workers()
    set_worker_limit(MAX_IN_FLIGHT)


def tool_workers() -> int:
    return sum(thread.name == "tool-worker" for thread in threading.enumerate())


async def test_abandoned_calls_never_grow_the_pool_past_its_limit(limit: int) -> None:
    # Each wave's calls are abandoned by their deadline while their threads still block: the
    # next wave queues for a worker instead of starting threads of its own.
    release = threading.Event()
    started: list[int] = []

    def block() -> None:
        started.append(threading.get_ident())
        release.wait(10)

    for _ in range(4):
        waves = [asyncio.wait_for(run_blocking(block), 0.05) for _ in range(limit)]
        results = await asyncio.gather(*waves, return_exceptions=True)
        assert all(isinstance(result, TimeoutError) for result in results)
        assert worker_count() <= limit
        assert tool_workers() <= limit
    # Only the first wave ever ran; the others were dropped unrun once their callers left.
    release.set()
    assert await run_blocking(lambda: "served") == "served"
    assert len(started) == limit


async def test_a_queued_call_whose_caller_left_is_dropped_unrun(limit: int) -> None:
    release = threading.Event()
    ran: list[str] = []
    busy = [asyncio.ensure_future(run_blocking(release.wait, 10)) for _ in range(limit)]
    await asyncio.sleep(0.05)
    queued = asyncio.ensure_future(run_blocking(ran.append, "queued"))
    await asyncio.sleep(0.05)
    queued.cancel()
    release.set()
    await asyncio.gather(*busy)
    await run_blocking(ran.append, "later")
    assert ran == ["later"]


async def test_calls_wait_for_a_worker_at_the_limit(limit: int) -> None:
    barrier = threading.Barrier(limit, timeout=5)
    results = await asyncio.gather(*(run_blocking(barrier.wait) for _ in range(limit)))
    assert sorted(results) == list(range(limit))
    # Twice the limit: the second half waits for the first, and all are served.
    total = await asyncio.gather(*(run_blocking(lambda: 1) for _ in range(2 * limit)))
    assert sum(total) == 2 * limit
    assert worker_count() <= limit


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        set_worker_limit(0)


def test_a_forked_child_starts_with_an_empty_pool() -> None:
    asyncio.run(run_blocking(lambda: None))
    assert worker_count() >= 1
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, whose coverage is not collected
        status = 1
        try:
            before = worker_count()
            served = asyncio.run(run_blocking(lambda: "child"))
            os.write(writer, f"{before} {served}".encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        report = pipe.read().decode()
    os.waitpid(pid, 0)
    assert report == "0 child"


# --- threads that cannot start --------------------------------------------------------------


class RefusedThreads:
    """`threading.Thread.start` failing as it does at a pids or memory limit, until lifted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.refusing = True
        self.refused = 0
        start = threading.Thread.start

        def refuse_or_start(thread: threading.Thread) -> None:
            if self.refusing and thread.name == "tool-worker":
                self.refused += 1
                raise RuntimeError("can't start new thread")
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", refuse_or_start)


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch, limit: int) -> RefusedThreads:
    return RefusedThreads(monkeypatch)


async def test_a_call_no_worker_can_take_is_refused_retryably_at_once(
    refused: RefusedThreads, limit: int, caplog: pytest.LogCaptureFixture
) -> None:
    # More failures than the limit: none of them may count as a worker.
    for _ in range(2 * limit):
        with pytest.raises(WorkerUnavailable) as caught:
            await asyncio.wait_for(run_blocking(lambda: "never"), 1)
        problem = caught.value.problem
        assert problem.code == "MCP_INTERNAL_ERROR"
        assert problem.metadata == {"retryable": True}
    assert refused.refused == 2 * limit
    assert worker_count() == 0
    # Reported once for the whole run of failures.
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "could not start a worker thread" in caplog.records[0].message
    # Once threads can start again, so does the pool, up to its limit.
    refused.refusing = False
    barrier = threading.Barrier(limit, timeout=5)
    results = await asyncio.gather(*(run_blocking(barrier.wait) for _ in range(limit)))
    assert sorted(results) == list(range(limit))
    assert worker_count() == tool_workers() == limit
    assert "worker threads start again" in caplog.text


async def test_a_call_waits_for_the_running_workers_when_no_other_can_start(
    refused: RefusedThreads, limit: int
) -> None:
    refused.refusing = False
    release = threading.Event()
    busy = asyncio.ensure_future(run_blocking(release.wait, 10))
    await asyncio.sleep(0.05)
    refused.refusing = True
    queued = asyncio.ensure_future(run_blocking(lambda: "served by the first worker"))
    await asyncio.sleep(0.05)
    assert not queued.done()
    assert refused.refused == 1
    release.set()
    assert await busy is True
    assert await queued == "served by the first worker"
    assert worker_count() == 1


def test_stop_after_threads_failed_to_start_ends_cleanly(refused: RefusedThreads) -> None:
    with pytest.raises(WorkerUnavailable):
        asyncio.run(run_blocking(lambda: None))
    # It used to join the thread that never started: RuntimeError, and exit status 1.
    stop_workers()
    refused.refusing = False
    assert asyncio.run(run_blocking(lambda: 7)) == 7
    stop_workers()
