"""Races: what changes under a read while it runs, with both resolvers.

A swapper process trades names as fast as it can (`renameat2(RENAME_EXCHANGE)`, so a name
never goes missing) while the tool reads through them thousands of times, on another core,
with no interpreter lock to share. Corpus cases A165 (a leaf swapped for a link to an
outside secret) and A169 (a leaf swapped for a FIFO, with a writer blocked in
`open(O_WRONLY)` that any open of the FIFO releases) are here, with a directory swapped for a
link to the outside and a leaf swapped for a device, whose opens inotify reports.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mcp_server_suite.schemas.problems import Problem
from tests.support.fs_tools import MODES, FileTools, call, file_tools
from tests.support.fs_tree import CANARY

pytestmark = pytest.mark.root

# Reads per race: a few seconds with both resolvers, and each side of every race is met
# many times (the tests check that they are).
RACE_READS = 5_000

SWAPPER = """
import ctypes, os, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("ready", flush=True)
while True:
    if renameat2(-100, a, -100, b, 2):
        raise OSError(ctypes.get_errno(), "renameat2")
"""


@contextmanager
def swapping(a: Path, b: Path) -> Iterator[None]:
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(a), str(b)], stdout=subprocess.PIPE
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == b"ready\n"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        assert swapper.stdout is not None
        swapper.stdout.close()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def race(tools: FileTools, path: str) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    for _ in range(RACE_READS):
        answer = call(tools.read, {"relative_path": path})
        outcomes[answer.detail if isinstance(answer, Problem) else answer["content"]] += 1
    return outcomes


def test_directory_swapped_for_an_outside_link(tmp_path: Path, mode: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "swap").mkdir(parents=True)
    (root / "swap" / "secret.txt").write_bytes(b"inside\n")
    outside.mkdir()
    (outside / "secret.txt").write_bytes(CANARY.encode())
    (root / "swap_link").symlink_to(outside)
    with file_tools(root, mode) as tools, swapping(root / "swap", root / "swap_link"):
        outcomes = race(tools, "swap/secret.txt")
    assert CANARY not in "".join(outcomes), outcomes
    assert set(outcomes) <= {"inside\n", "'swap/secret.txt' resolves outside the sandbox"}
    assert all(outcomes[key] > 0 for key in outcomes), outcomes
    assert len(outcomes) == 2, outcomes


def test_leaf_swapped_for_an_outside_link(tmp_path: Path, mode: str) -> None:
    # A165: race/target.txt swapped, by rename, with a symbolic link to the outside secret.
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "race").mkdir(parents=True)
    (root / "race" / "target.txt").write_bytes(b"inside\n")
    outside.mkdir()
    (outside / "secret.txt").write_bytes(CANARY.encode())
    (root / "race" / "other").symlink_to(outside / "secret.txt")
    with (
        file_tools(root, mode) as tools,
        swapping(root / "race" / "target.txt", root / "race" / "other"),
    ):
        outcomes = race(tools, "race/target.txt")
    assert CANARY not in "".join(outcomes), outcomes
    assert outcomes["inside\n"] > 0
    refused = "'race/target.txt' resolves outside the sandbox"
    changed = "'race/target.txt' changed while it was being read; try again"
    assert set(outcomes) <= {"inside\n", refused, changed}, outcomes
    assert outcomes[refused] > 0, outcomes


def test_leaf_swapped_for_a_fifo_never_opens_it(tmp_path: Path, mode: str) -> None:
    # A169: a writer blocked in open(O_WRONLY) is released by any open of the FIFO for
    # reading; on main the server released it 4,181 times in 5 s.
    root = tmp_path / "root"
    root.mkdir()
    (root / "target.txt").write_bytes(b"plain\n")
    os.mkfifo(root / "fifo")
    released = threading.Event()

    def writer() -> None:
        fd = os.open(root / "fifo", os.O_WRONLY)
        released.set()
        os.close(fd)

    waiting = threading.Thread(target=writer, daemon=True)
    waiting.start()
    with file_tools(root, mode) as tools, swapping(root / "target.txt", root / "fifo"):
        outcomes = race(tools, "target.txt")
    assert not released.is_set(), "the FIFO was opened"
    special = (
        "'target.txt' is not a regular file (it is a FIFO, socket or device) and is not opened"
    )
    assert outcomes["plain\n"] > 0, outcomes
    assert outcomes[special] > 0, outcomes
    # Let the writer go, through whichever name the FIFO ended up with.
    fifo = next(path for path in (root / "target.txt", root / "fifo") if path.is_fifo())
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    waiting.join(5)
    os.close(reader)


IN_OPEN = 0x20


def test_leaf_swapped_for_a_device_never_opens_it(tmp_path: Path, mode: str) -> None:
    # Opening a device runs its driver; inotify reports every open of the node, and an
    # O_PATH lookup is not an open.
    root = tmp_path / "root"
    root.mkdir()
    (root / "target.txt").write_bytes(b"plain\n")
    os.mknod(root / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    libc = ctypes.CDLL(None, use_errno=True)
    notify = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert notify >= 0
    try:
        assert libc.inotify_add_watch(notify, os.fsencode(root / "device"), IN_OPEN) >= 0
        with file_tools(root, mode) as tools, swapping(root / "target.txt", root / "device"):
            outcomes = race(tools, "target.txt")
        try:
            events = os.read(notify, 4096)
        except BlockingIOError:
            events = b""
    finally:
        os.close(notify)
    opens = [struct.unpack_from("iIII", events, offset)[1] for offset in range(0, len(events), 16)]
    assert not opens, "the device was opened"
    special = (
        "'target.txt' is not a regular file (it is a FIFO, socket or device) and is not opened"
    )
    assert outcomes["plain\n"] > 0, outcomes
    assert outcomes[special] > 0, outcomes
