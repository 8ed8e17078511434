"""The walk's own bookkeeping: levels reached again by name, and what it closes on failure.

A walk holds descriptors for a few levels only (`walk.py`, rule 3); going back up past
them, it reaches a level again by its name from the nearest level it holds, and must find the
same inode. Here the tree changes between the way down and the way up, and the walk must say
so (`EAGAIN`, "changed"), leaving no descriptor open.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.tools.fs.resolution import Resolver
from mcp_server_suite.tools.fs.root import SandboxRoot, open_root
from mcp_server_suite.tools.fs.walk import WINDOW, Walk

LEVELS = 100
# Up from level 100 to level 39: below every descriptor the walk kept on the way down but
# the root's, so level 39 is reached again from the root, past levels it does not keep.
UP = 61
CHANGED_LEVEL = 20


def chain(root: Path, levels: int) -> Path:
    deepest = root.joinpath(*["d"] * levels)
    deepest.mkdir(parents=True)
    return deepest


@pytest.fixture
def walker(tmp_path: Path) -> Iterator[tuple[Resolver, SandboxRoot, int, Path]]:
    deepest = chain(tmp_path, LEVELS)
    opened = open_root(tmp_path)
    resolver = Resolver.probe(opened, cross_mounts=False, use_kernel=False)
    fd = opened.acquire()
    try:
        yield resolver, opened, fd, deepest
    finally:
        opened.release()
        opened.close()


def descended(resolver: Resolver, fd: int, deepest: Path) -> Walk:
    walk = resolver.start_walk(fd)
    status = os.stat(deepest)
    walk.enter(("d",) * LEVELS, (status.st_dev, status.st_ino))
    return walk


def test_levels_are_reached_again_by_name(
    walker: tuple[Resolver, SandboxRoot, int, Path],
) -> None:
    resolver, _, fd, deepest = walker
    walk = descended(resolver, fd, deepest)
    try:
        held = sum(1 for level in walk._levels if level.fd is not None)
        assert held <= 3 * WINDOW
        resolved = walk.run("../" * UP, keep_parent=True)
        assert resolved.names == ("d",) * (LEVELS - UP)
        assert resolved.parent is not None
        resolved.close()
    finally:
        walk.close()


@pytest.mark.parametrize("change", ["renamed", "replaced"])
def test_a_level_changed_under_the_walk_is_refused(
    walker: tuple[Resolver, SandboxRoot, int, Path], change: str
) -> None:
    resolver, _, fd, deepest = walker
    walk = descended(resolver, fd, deepest)
    level = deepest.parents[LEVELS - CHANGED_LEVEL - 1]
    before = set(os.listdir("/proc/self/fd"))
    try:
        os.rename(level, level.parent / "gone")
        if change == "replaced":
            level.mkdir()
        with pytest.raises(OSError, match="a directory on the way changed") as info:
            walk.run("../" * UP, keep_parent=False)
        assert info.value.errno == errno.EAGAIN
    finally:
        walk.close()
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_refused_level_on_the_way_down_is_closed(
    walker: tuple[Resolver, SandboxRoot, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver, _, fd, _ = walker

    def refused(fd: int, status: os.stat_result) -> None:
        raise OSError(errno.EXDEV, "a mount point")

    walk = resolver.start_walk(fd)
    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(resolver, "ensure_allowed", refused)
    try:
        with pytest.raises(OSError, match="a mount point"):
            walk.enter(("d",), (0, 0))
    finally:
        walk.close()
    assert set(os.listdir("/proc/self/fd")) == before


def test_the_root_itself_keeps_itself_as_its_parent(
    walker: tuple[Resolver, SandboxRoot, int, Path],
) -> None:
    resolver, _, fd, _ = walker
    resolved = resolver.walk(fd, ".", keep_parent=True)
    assert resolved.parent is not None
    assert resolved.parent[1] == "."
    assert os.fstat(resolved.parent[0]).st_ino == os.fstat(fd).st_ino
    resolved.close()


def test_a_failing_status_of_the_last_directory_closes_its_parent(
    walker: tuple[Resolver, SandboxRoot, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver, _, fd, _ = walker
    real_fstat = os.fstat
    calls: list[int] = []

    def failing(descriptor: int) -> Any:
        calls.append(descriptor)
        # The walk states "d" on the way down, then the directory it returns.
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_fstat(descriptor)

    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fstat", failing)
    with pytest.raises(OSError, match="Input/output error"):
        resolver.walk(fd, "d", keep_parent=True)
    monkeypatch.undo()
    assert set(os.listdir("/proc/self/fd")) == before
