"""Containment in every resolver mode, as root and as nobody, with and without /proc.

Mounted beneath the root, for real: a bind mount of an outside directory of the same file
system (which only mount IDs tell from the root's own mount), a bind mount of an outside
file, a tmpfs, a procfs and a sysfs. Each mode of `tests/support/fs_child.py` (`openat2`, the
walk, and both without any `/proc`) runs as root and as uid 65534, and all must give the same
answer, which the table below states once:

- by default no mount is crossed (on main, without /proc, the walk read the bind mounts:
  it told mounts apart by device number alone);
- where the operator crosses mounts, pseudo file systems stay refused (on main, procfs gave
  away the server's memory), and an `anon_inode` link there is refused alike in every mode.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from tests.support.fs_child import ALL_MODES, USERS, Served, served
from tests.support.fs_tree import CANARY, mounted

pytestmark = pytest.mark.root

OUTSIDE = "resolves outside the sandbox"
PSEUDO = (
    "leads onto a kernel pseudo file system (procfs, sysfs, debugfs...), which the sandbox "
    "never reads, even where mounts are crossed"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("modes")
    root, outside = base / "root", base / "outside"
    for directory in (
        root / "sub",
        root / "bindout",
        root / "tmpfs",
        root / "procfs",
        root / "sysfs",
        outside / "sub",
    ):
        directory.mkdir(parents=True)
    for directory in (base, root, root / "sub", outside, outside / "sub"):
        directory.chmod(0o755)
    (root / "ok.txt").write_bytes(b"hello\n")
    (root / "sub" / "inner.txt").write_bytes(b"inner\n")
    (root / "bindfile.txt").write_bytes(b"covered\n")
    (root / "to_bind").symlink_to("bindout/secret.txt")
    (root / "to_proc").symlink_to("procfs/self/maps")
    (outside / "secret.txt").write_bytes(CANARY.encode())
    (outside / "sub" / "deep.txt").write_bytes(CANARY.encode())
    for path in (root / "ok.txt", root / "sub" / "inner.txt", outside / "secret.txt"):
        path.chmod(0o644)
    with ExitStack() as mounts:
        mounts.enter_context(mounted(str(outside), root / "bindout", "--bind"))
        mounts.enter_context(mounted(str(outside / "secret.txt"), root / "bindfile.txt", "--bind"))
        mounts.enter_context(mounted("tmpfs", root / "tmpfs", "-t", "tmpfs"))
        (root / "tmpfs" / "t.txt").write_bytes(b"on tmpfs\n")
        (root / "tmpfs").chmod(0o755)
        (root / "tmpfs" / "t.txt").chmod(0o644)
        mounts.enter_context(mounted("proc", root / "procfs", "-t", "proc"))
        mounts.enter_context(mounted("sysfs", root / "sysfs", "-t", "sysfs"))
        yield base


COMBINATIONS = list(itertools.product(ALL_MODES, USERS))


@pytest.fixture(
    scope="module", params=COMBINATIONS, ids=[f"{mode}-{user}" for mode, user in COMBINATIONS]
)
def confined(base: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    mode, user = request.param
    with served(base / "root", mode, user=user) as tools:
        yield tools


@pytest.fixture(
    scope="module", params=COMBINATIONS, ids=[f"{mode}-{user}" for mode, user in COMBINATIONS]
)
def crossing(base: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    mode, user = request.param
    with served(base / "root", mode, user=user, cross_mounts=True) as tools:
        yield tools


def content(answer: Any) -> str:
    assert isinstance(answer, dict), answer.detail
    text: str = answer["content"]
    return text


def detail(answer: Any) -> tuple[MCPErrorCode, str]:
    assert isinstance(answer, Problem), answer
    return answer.code, answer.detail


CONFINED = [
    ("ok.txt", "hello\n"),
    ("sub/inner.txt", "inner\n"),
    ("sub/../ok.txt", "hello\n"),
    ("bindout/secret.txt", OUTSIDE),
    ("bindout/sub/deep.txt", OUTSIDE),
    ("bindout/../ok.txt", OUTSIDE),
    ("bindfile.txt", OUTSIDE),
    ("to_bind", OUTSIDE),
    ("tmpfs/t.txt", OUTSIDE),
    ("procfs/self/maps", OUTSIDE),
    ("procfs/self/environ", OUTSIDE),
    ("sysfs/kernel/notes", OUTSIDE),
    ("to_proc", OUTSIDE),
]


@pytest.mark.parametrize(("path", "expected"), CONFINED)
def test_no_mount_is_crossed_by_default(confined: Served, path: str, expected: str) -> None:
    answer = confined.read({"relative_path": path})
    if expected == OUTSIDE:
        assert detail(answer) == (MCPErrorCode.ACCESS_DENIED, f"{path!r} {OUTSIDE}")
    else:
        assert content(answer) == expected
    assert CANARY not in str(answer)


@pytest.mark.parametrize("path", ["bindout", "bindout/sub", "tmpfs", "procfs", "sysfs"])
def test_no_mount_is_listed_into_by_default(confined: Served, path: str) -> None:
    assert detail(confined.list({"relative_path": path})) == (
        MCPErrorCode.ACCESS_DENIED,
        f"{path!r} {OUTSIDE}",
    )


def test_a_listing_hides_every_mount_point(confined: Served) -> None:
    answer = confined.list({})
    assert isinstance(answer, dict), answer.detail
    entries = {entry["name"]: entry for entry in answer["entries"]}
    for name in ("bindout", "bindfile.txt", "tmpfs", "procfs", "sysfs"):
        assert entries[name] == {"name": name, "type": "other", "size": None, "modified": None}
    # Links that lead onto a mount are in the root themselves: listed, but not as links in.
    assert entries["to_bind"]["type"] == entries["to_proc"]["type"] == "other"
    assert entries["ok.txt"]["type"] == "file"
    assert entries["sub"]["type"] == "directory"


CROSSED = [
    ("bindout/secret.txt", CANARY),
    ("bindout/sub/deep.txt", CANARY),
    ("bindfile.txt", CANARY),
    ("to_bind", CANARY),
    ("tmpfs/t.txt", "on tmpfs\n"),
    ("bindout/../ok.txt", "hello\n"),
    ("tmpfs/../ok.txt", "hello\n"),
    ("procfs/self/maps", PSEUDO),
    ("procfs/self/mem", PSEUDO),
    ("procfs/self/environ", PSEUDO),
    ("procfs/self/comm", PSEUDO),
    ("procfs/self/fd/0", PSEUDO),
    ("procfs/mounts", PSEUDO),
    ("procfs/self/cwd/ok.txt", PSEUDO),
    ("to_proc", PSEUDO),
    ("sysfs/kernel/notes", PSEUDO),
]


@pytest.mark.parametrize(("path", "expected"), CROSSED)
def test_pseudo_file_systems_stay_refused_where_mounts_are_crossed(
    crossing: Served, path: str, expected: str
) -> None:
    answer = crossing.read({"relative_path": path})
    if expected == PSEUDO:
        assert detail(answer) == (MCPErrorCode.ACCESS_DENIED, f"{path!r} {PSEUDO}")
    else:
        assert content(answer) == expected


def test_anon_inode_links_are_refused_alike_in_every_mode(crossing: Served) -> None:
    # On main, through procfs with cross mounts, an `anon_inode:inotify` link was "more than
    # 40 symbolic links" for openat2 and "does not exist" for the walk.
    answers = {
        detail(crossing.read({"relative_path": f"procfs/self/fd/{fd}"})) for fd in range(0, 12)
    }
    assert answers == {
        (MCPErrorCode.ACCESS_DENIED, f"'procfs/self/fd/{fd}' {PSEUDO}") for fd in range(0, 12)
    }


def test_a_listing_across_mounts_shows_data_and_hides_kernel_interfaces(
    crossing: Served,
) -> None:
    answer = crossing.list({})
    assert isinstance(answer, dict), answer.detail
    entries = {entry["name"]: entry for entry in answer["entries"]}
    assert entries["bindout"]["type"] == "directory"
    assert entries["to_bind"]["type"] == "symlink"
    for name in ("procfs", "sysfs"):
        assert entries[name] == {"name": name, "type": "other", "size": None, "modified": None}
    assert entries["to_proc"]["type"] == "other"
    assert detail(crossing.list({"relative_path": "procfs/self"})) == (
        MCPErrorCode.ACCESS_DENIED,
        f"'procfs/self' {PSEUDO}",
    )
