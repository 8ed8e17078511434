"""Waiting awake before sleeping (`core.busy_poll`): what is found, what is waited for, and the
event loop built on it (`core.event_loop`)."""

import asyncio
import os
import selectors
import threading
import time
from collections.abc import Iterator

import pytest

from mcp_server_suite.core.busy_poll import BUSY_POLL_S, ready_within
from mcp_server_suite.core.event_loop import BusyPollSelector, new_event_loop


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def test_ready_within_asks_until_yes() -> None:
    answers = iter([False, False, True])
    asked: list[bool] = []

    def ready() -> bool:
        asked.append(answer := next(answers))
        return answer

    assert ready_within(ready, seconds=60.0)
    assert asked == [False, False, True]


def test_ready_within_gives_up_when_the_time_is_up() -> None:
    asked = 0

    def never() -> bool:
        nonlocal asked
        asked += 1
        return False

    started = time.perf_counter()
    assert not ready_within(never, seconds=0.01)
    assert time.perf_counter() - started >= 0.01
    assert asked > 1


def test_ready_within_defaults_to_the_busy_poll_window() -> None:
    started = time.perf_counter()
    assert not ready_within(lambda: False)
    assert time.perf_counter() - started >= BUSY_POLL_S


def test_the_selector_returns_what_is_ready_without_sleeping(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    with BusyPollSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ, "input")
        os.write(write_end, b"x")
        (key, events), *rest = selector.select()
        assert (key.data, events, rest) == ("input", selectors.EVENT_READ, [])


def test_the_selector_sleeps_once_the_window_has_passed(pipe: tuple[int, int]) -> None:
    # Input that comes long after the window wakes the sleeping select, as it would wake
    # the platform's own.
    read_end, write_end = pipe
    writer = threading.Timer(0.05, os.write, (write_end, b"x"))
    with BusyPollSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ)
        writer.start()
        try:
            events = selector.select()
        finally:
            writer.join()
        assert [key.fd for key, _ in events] == [read_end]


@pytest.mark.parametrize("timeout", [0.02, BUSY_POLL_S / 2])
def test_the_selector_keeps_the_timeout_it_is_given(pipe: tuple[int, int], timeout: float) -> None:
    # A timeout shorter than the window ends the poll at the timeout; a longer one sleeps
    # for the rest of it. Either way nothing is returned, after the whole timeout.
    read_end, _ = pipe
    with BusyPollSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ)
        started = time.perf_counter()
        assert selector.select(timeout) == []
        assert time.perf_counter() - started >= timeout


@pytest.mark.parametrize("timeout", [0, -1])
def test_the_selector_only_looks_when_told_not_to_wait(
    pipe: tuple[int, int], timeout: float
) -> None:
    read_end, write_end = pipe
    with BusyPollSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ)
        assert selector.select(timeout) == []
        os.write(write_end, b"x")
        assert [key.fd for key, _ in selector.select(timeout)] == [read_end]


def test_the_session_loop_runs_readers_and_timers_in_order(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    seen: list[str] = []

    async def session() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, asyncio.SelectorEventLoop)
        got = loop.create_future()
        loop.add_reader(read_end, lambda: got.set_result(os.read(read_end, 10)))
        loop.call_later(0.01, seen.append, "timer")
        loop.call_later(0.03, os.write, write_end, b"ping")
        assert await got == b"ping"
        loop.remove_reader(read_end)
        seen.append("read")
        await asyncio.sleep(0)

    loop = new_event_loop()
    try:
        assert isinstance(loop._selector, BusyPollSelector)  # type: ignore[attr-defined]
        loop.run_until_complete(session())
    finally:
        loop.close()
    assert seen == ["timer", "read"]
