"""Audit sinks: stderr, an append-only file, the journal's native protocol, and open_sink."""

import contextlib
import errno
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server_suite.audit import sinks
from mcp_server_suite.audit.sinks import (
    JOURNAL_IDENTIFIER,
    FileSink,
    JournalSink,
    RecordsLost,
    StderrSink,
    journal_datagram,
    open_sink,
)
from mcp_server_suite.config import ConfigError
from mcp_server_suite.core.stderr import StderrStream

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


@pytest.fixture
def journal_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the stand-in journal listens: a relative path, from inside `tmp_path`, so that
    a deep temporary directory never makes it longer than a Unix socket's 108 bytes."""
    monkeypatch.chdir(tmp_path)
    return Path("journal.socket")


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


class ShortWrites:
    """`os.write` on the sink's file as a disk that fills mid-write does it: a piece of the
    batch is written, then the rest fails with `error` (or goes, when `error` is None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: int | None) -> None:
        self.real_write = os.write
        self.error = error
        self.calls = 0
        monkeypatch.setattr(os, "write", self.write)

    def write(self, fd: int, data: bytes) -> int:
        self.calls += 1
        if self.calls == 1:
            return self.real_write(fd, data[:5])
        if self.error is not None:
            raise OSError(self.error, os.strerror(self.error))
        return self.real_write(fd, data)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT, None])
def test_a_short_write_is_completed_or_cut_back_and_reported_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int | None
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(RECORD)
    sink = FileSink(path)
    short = ShortWrites(monkeypatch, error)
    if error is None:
        # The cause passed (the disk has room again): the rest goes, and the batch is whole.
        sink.write_batch([RECORD, RECORD])
    else:
        with pytest.raises(RecordsLost) as caught:
            sink.write_batch([RECORD, RECORD])
        # The kernel's reason, not the short write's; no torn piece left behind.
        assert caught.value.errno == error
        assert caught.value.reason == errno.errorcode[error]
        assert caught.value.written == 0
        assert path.read_bytes() == RECORD
        short.error = None
        sink.write(RECORD)
    sink.close()
    assert path.read_bytes() == RECORD * 3 if error is None else RECORD * 2


def test_a_torn_piece_another_writer_appended_after_starts_the_next_batch_on_a_new_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)
    short = ShortWrites(monkeypatch, errno.ENOSPC)
    real_lseek = os.lseek

    def other_writer_appends(fd: int, position: int, whence: int) -> int:
        # Right after the torn piece, another server sharing the file appends its record.
        found = real_lseek(fd, position, whence)
        with path.open("ab") as other:
            other.write(b"other\n")
        return found

    monkeypatch.setattr(os, "lseek", other_writer_appends)
    with pytest.raises(RecordsLost, match="No space"):
        sink.write(RECORD)
    monkeypatch.setattr(os, "lseek", real_lseek)
    short.error = None
    sink.write(RECORD)
    sink.close()
    assert path.read_bytes() == RECORD[:5] + b"other\n" + b"\n" + RECORD


def test_a_torn_piece_that_cannot_be_cut_starts_the_next_batch_on_a_new_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An append-only file (chattr +a) refuses ftruncate.
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)
    short = ShortWrites(monkeypatch, errno.ENOSPC)

    def append_only(fd: int, length: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "ftruncate", append_only)
    with pytest.raises(RecordsLost):
        sink.write(RECORD)
    short.error = None
    sink.write(RECORD)
    sink.close()
    assert path.read_bytes() == RECORD[:5] + b"\n" + RECORD


def test_a_write_that_fails_at_once_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(path)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(RecordsLost) as caught:
        sink.write(RECORD)
    assert caught.value.reason == "ENOSPC"
    sink.close()
    assert path.read_bytes() == b""


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


def test_a_required_trail_needs_an_open_stderr() -> None:
    # A stderr the launcher closed reads /dev/null since start-up
    # (`core.stdio.guard_standard_descriptors`): records there would be lost.
    assert isinstance(open_sink("stderr", required=True), StderrSink)
    assert isinstance(open_sink("stderr", stderr_closed=True), StderrSink)
    with pytest.raises(ConfigError, match="an open stderr when MCP_AUDIT_REQUIRED=true"):
        open_sink("stderr", required=True, stderr_closed=True)


def test_stderr_sink_on_a_stderr_nobody_reads_loses_records_with_the_reason() -> None:
    reader, writer = os.pipe()
    try:
        stream = StderrStream(writer, "poll")
        sink = StderrSink(stream)
        os.set_blocking(writer, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(writer, b"x" * 4096)
        with pytest.raises(RecordsLost) as caught:
            sink.write_batch([RECORD, RECORD])
        assert caught.value.reason == "EAGAIN: stderr is full: nobody reads it"
        assert caught.value.written == 0
        assert stream.dropped_records == 2
    finally:
        os.close(reader)
        os.close(writer)


class RefusingSocket:
    """A journal socket whose every send is refused, even right after a reconnection."""

    def __init__(self) -> None:
        self.connects = 0

    def send(self, datagram: bytes) -> int:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    def connect(self, path: str) -> None:
        self.connects += 1


def test_the_journal_is_reconnected_once_per_datagram(journal_path: Path) -> None:
    path = journal_path
    with journal(path):
        sink = JournalSink(path)
        refusing = RefusingSocket()
        with pytest.raises(ConnectionRefusedError):
            sink._send(refusing, b"MESSAGE=x\n", time.monotonic())  # type: ignore[arg-type]
        assert refusing.connects == 1
        sink.close()


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


def test_journal_sink_sends_one_datagram_per_record(journal_path: Path) -> None:
    path = journal_path
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


def test_journal_sink_carries_a_record_of_the_largest_size(journal_path: Path) -> None:
    big = b'{"arguments":"' + b"x" * (64 * 1024) + b'"}\n'
    path = journal_path
    with journal(path) as receiver:
        sink = JournalSink(path)
        sink.write(big)
        assert receiver.recv(1 << 20) == journal_datagram(big)
        sink.close()


def test_journal_sink_reaches_a_restarted_journal(journal_path: Path) -> None:
    path = journal_path
    with journal(path):
        sink = JournalSink(path)
    # journald restarted: a new socket at the same path.
    with journal(path) as receiver:
        sink.write(RECORD)
        assert receiver.recv(1 << 20) == journal_datagram(RECORD)
    with pytest.raises(RecordsLost) as caught:
        sink.write(RECORD)  # and now no journal at all
    assert caught.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    sink.close()
    with pytest.raises(RecordsLost, match="closed"):
        sink.write(RECORD)


def fill(sink: JournalSink) -> int:
    """Send until the journal's queue is full; how many datagrams it took."""
    for sent in range(100_000):
        try:
            sink.write(RECORD)
        except RecordsLost as lost:
            if lost.errno != errno.EAGAIN:
                raise
            return sent
    raise AssertionError("the journal's queue never filled")


def test_a_journal_that_does_not_read_is_never_waited_for_unless_required(
    journal_path: Path,
) -> None:
    # A trail that is not required never waits: a full queue fails the batch at once, with
    # its reason, and the records sent before the failure count as written.
    path = journal_path
    with journal(path) as receiver:
        sink = JournalSink(path)
        taken = fill(sink)
        started = time.monotonic()
        with pytest.raises(RecordsLost) as caught:
            sink.write_batch([RECORD, RECORD])
        assert time.monotonic() - started < 0.05
        assert caught.value.written == 0
        assert caught.value.reason == "EAGAIN: the journal's queue is full: journald is not reading"
        # Room for one: the batch fails after its first record, which counts as written.
        receiver.recv(1 << 20)
        with pytest.raises(RecordsLost) as caught:
            sink.write_batch([RECORD, RECORD, RECORD])
        assert caught.value.written == 1
        # Once it reads again, records go.
        for _ in range(taken):
            receiver.recv(1 << 20)
        sink.write_batch([RECORD, RECORD])
        sink.close()


def test_a_required_journal_is_waited_for_once_until_it_takes_a_datagram_again(
    journal_path: Path,
) -> None:
    path = journal_path
    with journal(path) as receiver:
        sink = JournalSink(path, send_timeout=0.2)
        fill(sink)  # the first failure waited its 0.2 s
        # The journal did not read meanwhile: later batches fail at once, not after 0.2 s each.
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(RecordsLost):
                sink.write_batch([RECORD])
            assert time.monotonic() - started < 0.1
        # It reads one: the next batch goes, and the journal is waited for again.
        receiver.recv(1 << 20)
        sink.write(RECORD)
        started = time.monotonic()
        with pytest.raises(RecordsLost):
            sink.write(RECORD)
        assert time.monotonic() - started >= 0.15
        # Taken again, then full again: a wait that ends with room sends the datagram.
        receiver.recv(1 << 20)
        sink.write(RECORD)
        reader = threading.Timer(0.05, receiver.recv, (1 << 20,))
        reader.start()
        sink.write(RECORD)
        reader.join()
        sink.close()


def test_open_sink_journal(journal_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = journal_path
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


def test_journal_sink_closes_its_socket_when_it_cannot_connect(journal_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        JournalSink(journal_path)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_an_error_without_errno_is_still_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(path: Path, *, send_timeout: float) -> JournalSink:
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


def test_a_batch_is_one_datagram_per_record_to_the_journal(journal_path: Path) -> None:
    path = journal_path
    other = RECORD.replace(b"1", b"2")
    with journal(path) as receiver:
        sink = JournalSink(path)
        sink.write_batch([RECORD, other])
        assert receiver.recv(1 << 20) == journal_datagram(RECORD)
        assert receiver.recv(1 << 20) == journal_datagram(other)
        sink.close()
