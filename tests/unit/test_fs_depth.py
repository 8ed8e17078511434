"""Deep trees: a bounded number of descriptors per lookup, bounded work per listing.

On main the walk held one descriptor per level: a path of 1,400 levels under
`RLIMIT_NOFILE` 1024 was refused as "outside the sandbox" (the mount check could not open
fdinfo: EMFILE became EXDEV), and listing a directory 8,000 levels deep took 0.2 s per link
entry, each resolved from the root. Here, in every resolver mode: deep paths resolve with a
few dozen descriptors to spare, a shortage is answered as one (retryable), and a deep
listing's opens grow with its entries, not with its depth times its entries.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools.fs import listing, walk
from tests.support.fs_child import ALL_MODES, USERS, served
from tests.support.fs_tools import call, file_tools
from tests.support.fs_tree import remove_deep_tree

pytestmark = pytest.mark.root

# 1,400 levels: the depth the attack was refused at, under a descriptor limit of 1024.
SHALLOW_LEVELS = 1400
# 8,000 levels, reached through eight links of 1,000 levels each (the canonical path is
# 16,000 characters, within MAX_RESOLVED_CHARS).
DEEP_LEVELS = 8000
HOP = 1000
LINKS = 40

# Descriptors a child may open beyond those it holds: more than the walk's bound (40, and a
# few for the read itself and the event loop), far fewer than one per level.
SPARE = 64

SHALLOW_PATH = "d/" * SHALLOW_LEVELS + "f.txt"
DEEP_DIRECTORY = "j/" * (DEEP_LEVELS // HOP)
DEEP_PATH = DEEP_DIRECTORY + "f.txt"
SHORTAGE = "The server is short of open files or memory right now"

# The tree has 9,400 directories, one per level. On a disk each mkdir and rmdir waits for the
# journal (about a millisecond each: 20 s to make and remove the tree), on tmpfs none does;
# the walk, the descriptors and the mount checks under test are the same on either.
TMPFS = Path("/dev/shm")


def _tree_parent() -> str | None:
    """A tmpfs directory to build the tree in, or None for the default temporary one."""
    usable = TMPFS.is_dir() and os.access(TMPFS, os.W_OK | os.X_OK)
    return str(TMPFS) if usable else None


def _chain(fd: int, name: str, levels: int) -> int:
    for _ in range(levels):
        os.mkdir(name, 0o755, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def _file(fd: int, name: str, content: bytes) -> None:
    leaf = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leaf, content)
    os.close(leaf)


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="mcp-fs-deep-", dir=_tree_parent()))
    root = base / "root"
    root.mkdir(mode=0o755)
    base.chmod(0o755)
    try:
        fd = _chain(os.open(root, os.O_RDONLY | os.O_DIRECTORY), "d", SHALLOW_LEVELS)
        _file(fd, "f.txt", b"shallow\n")
        os.close(fd)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(DEEP_LEVELS // HOP):
            os.symlink("/".join(["e"] * HOP), "j", dir_fd=fd)
            fd = _chain(fd, "e", HOP)
        _file(fd, "f.txt", b"deep\n")
        for index in range(LINKS):
            os.symlink("f.txt", f"l{index:02d}", dir_fd=fd)
            os.symlink("../e/f.txt", f"u{index:02d}", dir_fd=fd)
        # Up 1,000 levels and down again through the last hop's link.
        os.symlink("/".join([".."] * HOP) + "/j/f.txt", "far", dir_fd=fd)
        os.close(fd)
        yield root
    finally:
        remove_deep_tree(root, "d")
        remove_deep_tree(root, "e")
        shutil.rmtree(base)


COMBINATIONS = list(itertools.product(ALL_MODES, USERS))


@pytest.mark.parametrize(("mode", "user"), COMBINATIONS)
def test_deep_paths_resolve_with_few_descriptors(root: Path, mode: str, user: str) -> None:
    with served(root, mode, user=user, spare=SPARE) as tools:
        shallow = tools.read({"relative_path": SHALLOW_PATH})
        deep = tools.read({"relative_path": DEEP_PATH})
        listed = tools.list({"relative_path": "/".join(["d"] * SHALLOW_LEVELS)})
    assert isinstance(shallow, dict), shallow.detail
    assert shallow["content"] == "shallow\n"
    assert isinstance(deep, dict), deep.detail
    assert (deep["content"], deep["resolved_path"]) == ("deep\n", "e/" * DEEP_LEVELS + "f.txt")
    assert isinstance(listed, dict), listed.detail
    assert [entry["name"] for entry in listed["entries"]] == ["f.txt"]


@pytest.mark.parametrize(("mode", "user"), COMBINATIONS)
def test_a_shortage_of_descriptors_is_retryable_never_outside(
    root: Path, mode: str, user: str
) -> None:
    with served(root, mode, user=user, spare=2) as tools:
        answers = [
            tools.read({"relative_path": DEEP_PATH}),
            tools.list({"relative_path": DEEP_DIRECTORY}),
        ]
    for answer in answers:
        assert isinstance(answer, Problem), answer
        assert answer.code is MCPErrorCode.INTERNAL_ERROR
        assert answer.detail.startswith(SHORTAGE)
        assert answer.metadata == {"retryable": True}


@pytest.mark.parametrize("mode", ["kernel", "walk"])
def test_a_deep_listing_resolves_links_from_the_directory(
    root: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = 0
    real_open = os.open

    def counted(*args: Any, **kwargs: Any) -> int:
        nonlocal opens
        opens += 1
        return real_open(*args, **kwargs)

    with file_tools(root, mode) as tools:
        monkeypatch.setattr(os, "open", counted)
        answer = call(tools.list, {"relative_path": DEEP_DIRECTORY, "max_entries": 1000})
        monkeypatch.undo()
    assert isinstance(answer, dict), answer.detail
    types = {entry["name"]: entry["type"] for entry in answer["entries"]}
    assert types == {
        "f.txt": "file",
        "far": "symlink",
        **{f"l{index:02d}": "symlink" for index in range(LINKS)},
        **{f"u{index:02d}": "symlink" for index in range(LINKS)},
    }
    # Down to the directory a few times (the lookup, and once more for its links), then a
    # handful of opens per entry. On main: every link was resolved from the root, 8,000
    # levels each.
    entries = len(types)
    assert opens <= 3 * DEEP_LEVELS + 900 * walk.WINDOW + 12 * entries, opens


def test_a_listing_that_runs_out_of_work_says_it_is_cut_short(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "LINK_STEPS", DEEP_LEVELS + 10)
    with file_tools(root, "walk") as tools:
        answer = call(tools.list, {"relative_path": DEEP_DIRECTORY, "max_entries": 1000})
    assert isinstance(answer, dict), answer.detail
    assert answer["truncated"] is True
    names = [entry["name"] for entry in answer["entries"]]
    assert 0 < len(names) < 2 * LINKS + 2
    assert names == sorted(names)


@pytest.mark.parametrize("top", [*range(0, 80), 511, 512, 513, 4095, 4096, 4097, 8191, 8192, 20000])
def test_the_walk_keeps_a_few_levels_per_tier(top: int) -> None:
    kept = [level for level in range(top + 1) if walk._kept(level, top)]
    tiers = 1
    while walk.WINDOW**tiers <= top:
        tiers += 1
    assert len(kept) <= walk.WINDOW * tiers
    assert top in kept
    assert 0 in kept
