"""Worker threads: results, errors, cancellation, a closed loop, and stopping."""

import asyncio
import threading
import time

import pytest

from mcp_server_suite.workers import run_blocking, stop_workers


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
