"""The event loop's channels (`core.channels`), in-process over pipes."""

import asyncio
import os
import threading

import pytest

from mcp_server_suite.core import channels


async def test_a_reader_thread_that_cannot_start_is_tried_again(
    pipes: tuple[int, int, int, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pids or memory limit: the first tries fail, then the limit is lifted.
    client_out, server_in, server_out, _ = pipes
    refusals = [RuntimeError("can't start new thread")] * 2
    start = threading.Thread.start

    def refuse_then_start(thread: threading.Thread) -> None:
        if thread.name == "stdin-reader" and refusals:
            raise refusals.pop()
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_then_start)
    monkeypatch.setattr(channels, "READER_RETRY_S", 0.01)
    channel = channels._ThreadChannel(server_in, os.dup(server_out))
    os.write(client_out, b"a request\n")
    assert await asyncio.wait_for(channel.read(), 5) == b"a request\n"
    assert refusals == []
    assert "could not start the input's reader thread" in caplog.text
    os.close(client_out)
    assert await asyncio.wait_for(channel.read(), 5) == b""
    await channel.aclose()
