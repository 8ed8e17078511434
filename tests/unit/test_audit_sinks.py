"""Audit sinks: stderr, an append-only file, the journal's native protocol, and open_sink."""

import contextlib
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server_suite.audit import sinks
from mcp_server_suite.audit.sinks import (
    JOURNAL_IDENTIFIER,
    FileSink,
    JournalSink,
    StderrSink,
    journal_datagram,
    open_sink,
)
from mcp_server_suite.config import ConfigError

RECORD = b'{"audit":"tools/call","request_id":1}\n'


@contextlib.contextmanager
def journal(path: Path) -> Iterator[socket.socket]:
    """A stand-in for journald: a datagram socket bound at `path`."""
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    receiver.settimeout(5)
    try:
        yield receiver
    finally:
        receiver.close()
        path.unlink(missing_ok=True)


def fields(datagram: bytes) -> dict[str, str]:
    assert datagram.endswith(b"\n")
    return dict(line.split("=", 1) for line in datagram.decode("ascii").splitlines())


# --- file ---------------------------------------------------------------------------------


def test_file_sink_creates_an_owner_only_file_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)
    sink.write(RECORD)
    sink.write(RECORD)
    sink.close()
    sink.close()  # idempotent
    assert path.read_bytes() == RECORD * 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sink.description == str(path)


def test_file_sink_appends_after_what_is_there(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"earlier\n")
    sink = FileSink(path)
    # Another writer (another server sharing the file) moves the end meanwhile.
    with path.open("ab") as other:
        other.write(b"other\n")
    sink.write(RECORD)
    sink.close()
    assert path.read_bytes() == b"earlier\nother\n" + RECORD


def test_a_short_write_fails_and_the_next_record_starts_a_new_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)
    real_write = os.write

    def torn(fd: int, data: bytes) -> int:
        return real_write(fd, data[:5])

    monkeypatch.setattr(os, "write", torn)
    with pytest.raises(OSError, match="short write"):
        sink.write(RECORD)
    monkeypatch.setattr(os, "write", real_write)
    sink.write(RECORD)
    sink.write(RECORD)
    sink.close()
    assert path.read_bytes() == RECORD[:5] + b"\n" + RECORD + RECORD


def test_a_fifo_with_a_reader_is_not_a_file_to_append_to(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(ConfigError, match="a regular file to append to") as caught:
            FileSink(fifo)
    finally:
        os.close(reader)
    assert caught.value.variable == "MCP_AUDIT_LOG"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("fifo", "ENXIO"),  # no reader: the open fails at once instead of waiting for one
        ("directory", "EISDIR"),
        ("missing/audit.jsonl", "ENOENT"),
        ("device", "a regular file"),
    ],
)
def test_open_sink_refuses_what_it_cannot_append_to(tmp_path: Path, name: str, reason: str) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "directory").mkdir()
    (tmp_path / "device").symlink_to(os.devnull)
    with pytest.raises(ConfigError, match=reason) as caught:
        open_sink(tmp_path / name)
    assert caught.value.variable == "MCP_AUDIT_LOG"
    assert str(tmp_path / name) in str(caught.value)


def test_open_sink_opens_a_file(tmp_path: Path) -> None:
    sink = open_sink(tmp_path / "a.jsonl", required=True)
    assert isinstance(sink, FileSink)
    sink.close()


# --- stderr -------------------------------------------------------------------------------


def test_stderr_sink_writes_to_descriptor_2(capfd: pytest.CaptureFixture[str]) -> None:
    sink = open_sink("stderr")
    assert isinstance(sink, StderrSink)
    sink.write(RECORD)
    sink.close()
    os.fstat(2)  # never closed by the sink
    assert capfd.readouterr().err == RECORD.decode()
    assert sink.description == "stderr"


def test_a_required_trail_needs_an_open_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_sink("stderr", required=True), StderrSink)
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    monkeypatch.setattr(sinks, "_STDERR_FD", closed)
    assert isinstance(open_sink("stderr"), StderrSink)
    with pytest.raises(ConfigError, match="an open stderr when MCP_AUDIT_REQUIRED=true"):
        open_sink("stderr", required=True)


def test_off_opens_nothing() -> None:
    assert open_sink("off") is None


# --- journal ------------------------------------------------------------------------------


def test_journal_datagram_fields() -> None:
    assert fields(journal_datagram(RECORD)) == {
        "MESSAGE": RECORD.decode().rstrip("\n"),
        "SYSLOG_IDENTIFIER": JOURNAL_IDENTIFIER,
        "PRIORITY": "6",
    }
    with pytest.raises(ValueError, match="one line"):
        journal_datagram(b'{"a":\n1}\n')


def test_journal_sink_sends_one_datagram_per_record(tmp_path: Path) -> None:
    path = tmp_path / "journal.socket"
    with journal(path) as receiver:
        sink = JournalSink(path)
        sink.write(RECORD)
        sink.write(RECORD)
        first, second = receiver.recv(1 << 20), receiver.recv(1 << 20)
        sink.close()
        sink.close()
    assert first == second == journal_datagram(RECORD)
    assert JOURNAL_IDENTIFIER in sink.description
    with pytest.raises(OSError, match="closed"):
        sink.write(RECORD)


def test_journal_sink_carries_a_record_of_the_largest_size(tmp_path: Path) -> None:
    big = b'{"arguments":"' + b"x" * (64 * 1024) + b'"}\n'
    path = tmp_path / "journal.socket"
    with journal(path) as receiver:
        sink = JournalSink(path)
        sink.write(big)
        assert receiver.recv(1 << 20) == journal_datagram(big)
        sink.close()


def test_journal_sink_reaches_a_restarted_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.socket"
    with journal(path):
        sink = JournalSink(path)
    # journald restarted: a new socket at the same path.
    with journal(path) as receiver:
        sink.write(RECORD)
        assert receiver.recv(1 << 20) == journal_datagram(RECORD)
    with pytest.raises((FileNotFoundError, ConnectionRefusedError)):
        sink.write(RECORD)  # and now no journal at all
    sink.close()


def test_journal_sink_does_not_wait_long_for_a_full_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.socket"
    with journal(path):
        sink = JournalSink(path, send_timeout=0.05)
        failed = threading.Event()
        # The receiver never reads: its queue fills, and a send then times out.
        for _ in range(10_000):
            try:
                sink.write(RECORD)
            except TimeoutError:
                failed.set()
                break
        sink.close()
    assert failed.is_set()


def test_open_sink_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.socket"
    monkeypatch.setattr(sinks, "JOURNAL_SOCKET", path)
    with pytest.raises(ConfigError, match=r"journal to accept datagrams at .* \(ENOENT") as caught:
        open_sink("journal")
    assert caught.value.variable == "MCP_AUDIT_LOG"
    with journal(path) as receiver:
        sink = open_sink("journal")
        assert isinstance(sink, JournalSink)
        sink.write(RECORD)
        assert fields(receiver.recv(1 << 20))["SYSLOG_IDENTIFIER"] == JOURNAL_IDENTIFIER
        sink.close()


def test_journal_sink_closes_its_socket_when_it_cannot_connect(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        JournalSink(tmp_path / "missing.socket")
    assert set(os.listdir("/proc/self/fd")) <= before


def test_an_error_without_errno_is_still_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(path: Path) -> JournalSink:
        raise OSError("no errno")

    monkeypatch.setattr(sinks, "JournalSink", unreachable)
    with pytest.raises(ConfigError, match=r"\(error\)"):
        open_sink("journal")


def test_a_batch_is_one_write_to_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)
    real_write = os.write
    writes: list[bytes] = []

    def counted(fd: int, data: bytes) -> int:
        writes.append(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    sink.write_batch([RECORD, RECORD, RECORD])
    monkeypatch.setattr(os, "write", real_write)
    sink.close()
    assert writes == [RECORD * 3]
    assert path.read_bytes() == RECORD * 3


def test_a_batch_is_one_datagram_per_record_to_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.socket"
    other = RECORD.replace(b"1", b"2")
    with journal(path) as receiver:
        sink = JournalSink(path)
        sink.write_batch([RECORD, other])
        assert receiver.recv(1 << 20) == journal_datagram(RECORD)
        assert receiver.recv(1 << 20) == journal_datagram(other)
        sink.close()
