"""The session's event loop: the platform's selector, which first looks for input awake.

Rules `core.busy_poll` states hold here: before `select` may sleep, it polls without sleeping
for up to `BUSY_POLL_S`, and a timer due sooner ends the poll when it is due. Imported only
when the session's event loop starts, with asyncio.
"""

import asyncio
import selectors
import time

from mcp_server_suite.core.busy_poll import BUSY_POLL_S, ready_within

__all__ = ["BusyPollSelector", "new_event_loop"]


class BusyPollSelector(selectors.DefaultSelector):
    """The platform's selector, polling for `BUSY_POLL_S` before it sleeps (`core.busy_poll`)."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(timeout)
        started = time.perf_counter()
        look = super().select
        events: list[tuple[selectors.SelectorKey, int]] = []

        def ready() -> bool:
            events.extend(look(0))
            return bool(events)

        window = BUSY_POLL_S if timeout is None else min(BUSY_POLL_S, timeout)
        if ready_within(ready, window):
            return events
        if timeout is None:
            return look(None)
        return look(max(0.0, timeout - (time.perf_counter() - started)))


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop whose selector polls before it sleeps: the session's loop."""
    return asyncio.SelectorEventLoop(BusyPollSelector())
