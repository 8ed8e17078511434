"""Stderr that never waits for its reader (`core.stderr`), over real pipes, sockets and files.

A pipe stands in for the stderr of a client that never reads it: its buffer is shrunk to one
page, filled, and the stream must then drop and count instead of waiting, tell how many it
dropped once the pipe takes output again, and never leave a torn line.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server_suite.core import stderr as stderr_module
from mcp_server_suite.core.stderr import (
    StderrStream,
    claim_stderr,
    install_text_streams,
    stderr_stream,
)

PAGE = 4096

# Four pages: a pipe whose every page holds a little is full for `poll` (a page a write may
# need), so one page would leave no room for two messages in a row.
PIPE_BYTES = 4 * PAGE


class Pipe:
    """A small pipe whose write end plays stderr, and whose reader can drain it."""

    def __init__(self) -> None:
        self.reader, self.writer = os.pipe()
        fcntl.fcntl(self.writer, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self.capacity = fcntl.fcntl(self.writer, fcntl.F_GETPIPE_SZ)

    def fill(self) -> None:
        """Fill it to the last byte, without waiting."""
        blocking = os.get_blocking(self.writer)
        os.set_blocking(self.writer, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(self.writer, b"x" * PAGE)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(self.writer, b"x")
        os.set_blocking(self.writer, blocking)

    def drain(self) -> bytes:
        os.set_blocking(self.reader, False)
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.reader, 1 << 16):
                data += chunk
        return data

    def close(self) -> None:
        for fd in (self.reader, self.writer):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    made = Pipe()
    yield made
    made.close()


@pytest.fixture(autouse=True)
def _unclaimed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A claim lasts for the process: each test starts without one, and leaves none behind.
    monkeypatch.setattr(stderr_module, "_claimed", None)


def without_filler(data: bytes) -> bytes:
    return data.replace(b"x", b"")


@pytest.mark.parametrize("mode", ["claimed", "poll"])
def test_a_full_pipe_drops_and_counts_then_reports_once_it_takes_output(
    pipe: Pipe, mode: str
) -> None:
    stream = claim_stderr(pipe.writer) if mode == "claimed" else StderrStream(pipe.writer, "poll")
    assert stream.mode == ("nonblocking" if mode == "claimed" else "poll")
    pipe.fill()
    # Nothing waits: each message is dropped and counted by kind.
    assert stream.send(b"record 1\nrecord 2\n", records=2) is False
    assert stream.send(b"a log message\n") is False
    assert stream.write(b"a warning\n") == len(b"a warning\n")
    assert (stream.dropped_records, stream.dropped_messages) == (2, 2)
    pipe.drain()
    assert stream.send(b"record 3\n", records=1) is True
    lines = pipe.drain().decode().splitlines()
    assert lines == [
        "mcp_server_suite.core.stderr: stderr was full: 2 audit records and 2 other "
        "messages written meanwhile were dropped",
        "record 3",
    ]
    # Reported once: the next message comes alone.
    assert stream.send(b"record 4\n", records=1) is True
    assert pipe.drain() == b"record 4\n"


def test_a_message_taken_in_part_leaves_its_rest_first(pipe: Pipe) -> None:
    stream = claim_stderr(pipe.writer)
    big = b"".join(b"line %05d\n" % n for n in range(2000))
    assert len(big) > pipe.capacity
    assert stream.send(big) is True
    assert stream.dropped_messages == 0
    # While its rest waits, a new message finds no room and is dropped.
    assert stream.send(b"too early\n") is False
    received = pipe.drain()
    stream.flush_rest()
    while len(received) < len(big):
        received += pipe.drain()
        stream.flush_rest()
    assert received == big
    assert stream.send(b"later\n") is True
    assert pipe.drain().splitlines()[-1] == b"later"


def test_a_message_that_must_be_whole_ends_its_line_when_taken_in_part(pipe: Pipe) -> None:
    stream = claim_stderr(pipe.writer)
    big = b'{"audit":"' + b"r" * (2 * PIPE_BYTES) + b'"}\n'
    assert stream.send(big, records=1, whole=True) is False
    assert stream.dropped_records == 1
    head = pipe.drain()
    assert 0 < len(head) < len(big)
    assert stream.send(b"next\n", records=1, whole=True) is True
    tail = pipe.drain()
    # The torn piece ends its own line, the report follows, and no record was joined to it.
    assert tail.startswith(b"\n")
    assert tail.endswith(b"dropped\nnext\n")
    assert (head + tail).count(b"next") == 1


def test_the_launchers_pipe_keeps_its_flags(pipe: Pipe) -> None:
    # The launcher's description (which other processes may share) stays blocking: the
    # stream writes through a description of its own.
    shared = os.dup(pipe.writer)
    try:
        claim_stderr(shared)
        assert os.get_blocking(pipe.writer) is True
        assert os.get_blocking(shared) is False
        assert os.fstat(shared).st_ino == os.fstat(pipe.writer).st_ino
    finally:
        os.close(shared)


def test_without_proc_a_pipe_is_written_while_poll_says_it_has_room(
    pipe: Pipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_proc(path: str, *args: int) -> int:
        if path.startswith("/proc/"):
            raise PermissionError("a pipe of another user's")
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", no_proc)
    stream = claim_stderr(pipe.writer)
    assert stream.mode == "poll"
    assert os.get_blocking(pipe.writer) is True
    pipe.fill()
    assert stream.send(b"dropped\n") is False
    pipe.drain()
    # In pieces no larger than a pipe takes at once, so a message larger than that leaves
    # whole when there is room for it.
    message = b"y" * (3 * PAGE // 2) + b"\n"
    assert stream.send(message) is True
    assert pipe.drain().endswith(message)


def test_a_socket_is_written_while_poll_says_it_has_room(monkeypatch: pytest.MonkeyPatch) -> None:
    # journald's stream (StandardError=journal) is a socket: never opened again, polled.
    ours, theirs = socket.socketpair()
    opened: list[str] = []
    real_open = os.open

    def watched(path: str, *args: int) -> int:
        opened.append(path)
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", watched)
    try:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PAGE)
        stream = claim_stderr(ours.fileno())
        assert stream.mode == "poll"
        assert opened == []
        sent = 0
        while stream.send(b"z" * 512 + b"\n"):
            sent += 1
        assert sent > 0
        assert stream.dropped_messages == 1
    finally:
        ours.close()
        theirs.close()


def test_a_regular_file_is_written_plainly(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "stderr.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        stream = claim_stderr(fd)
        assert stream.mode == "blocking"
        assert stream.send(b"one\n", records=1) is True
        assert (tmp_path / "stderr.log").read_bytes() == b"one\n"
    finally:
        os.close(fd)


def test_a_closed_reader_drops_without_raising(pipe: Pipe) -> None:
    stream = claim_stderr(pipe.writer)
    os.close(pipe.reader)
    assert stream.send(b"nobody will read this\n") is False
    assert stream.dropped_messages == 1


def test_stderr_stream_is_the_claimed_one(pipe: Pipe) -> None:
    unclaimed = stderr_stream()
    assert unclaimed.fd == 2
    claimed = claim_stderr(pipe.writer)
    assert stderr_stream() is claimed


def test_the_log_and_the_text_streams_write_through_it(
    pipe: Pipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = claim_stderr(pipe.writer)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    install_text_streams(stream)
    assert sys.stderr is sys.stdout is stream.text
    logger = logging.getLogger("tests.stderr")
    logger.propagate = False
    handler = stream.log_handler("%(levelname)s %(name)s: %(message)s")
    logger.addHandler(handler)
    try:
        logger.warning("first")
        print("a stray print")
        pipe.fill()
        logger.warning("lost")
        print("lost too")
        pipe.drain()
        logger.warning("back")
    finally:
        logger.removeHandler(handler)
    text = without_filler(pipe.drain()).decode()
    assert text.splitlines() == [
        "WARNING mcp_server_suite.core.stderr: stderr was full: 0 audit records and 2 other "
        "messages written meanwhile were dropped",
        "WARNING tests.stderr: back",
    ]
    assert stream.dropped_messages == 2
    # It stays usable whatever closes its text stream (the interpreter's exit).
    stream.close()
    assert stream.send(b"still open\n") is True
    with pytest.raises(OSError, match="not read"):
        stream.read()
    assert stream.fileno() == pipe.writer
    assert stream.name == "<stderr>"


def test_messages_from_threads_are_counted_exactly(pipe: Pipe) -> None:
    stream = claim_stderr(pipe.writer)
    pipe.fill()

    def send_many() -> None:
        for _ in range(500):
            stream.send(b"m\n")

    threads = [threading.Thread(target=send_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stream.dropped_messages == 2000
