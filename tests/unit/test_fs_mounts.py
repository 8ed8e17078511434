"""Mounts beneath the root, for real: not crossed by default, crossed when the operator says.

On main, a bind mount of an outside directory or file and a procfs mounted beneath the root
were read (procfs gave away the server's environment and memory map). Here a bind mount of a
directory of the same file system (which only mount IDs tell apart), a bind mount of a file,
a tmpfs (another device) and a procfs are mounted beneath the root, with both resolvers and
`MCP_FS_CROSS_MOUNTS` off and on. Magic links stay refused even when mounts are crossed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from tests.support.fs_tools import MODES, FileTools, call, file_tools
from tests.support.fs_tree import CANARY, mounted

pytestmark = pytest.mark.root

OUTSIDE = "resolves outside the sandbox"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("mounts")
    root, outside = base / "root", base / "outside"
    for directory in (root / "bindout", root / "tmpfs", root / "procfs", outside / "sub"):
        directory.mkdir(parents=True)
    (root / "ok.txt").write_bytes(b"hello\n")
    (root / "bindfile.txt").write_bytes(b"covered\n")
    (outside / "secret.txt").write_bytes(CANARY.encode())
    (outside / "sub" / "deep.txt").write_bytes(CANARY.encode())
    with ExitStack() as mounts:
        mounts.enter_context(mounted(str(outside), root / "bindout", "--bind"))
        mounts.enter_context(mounted(str(outside / "secret.txt"), root / "bindfile.txt", "--bind"))
        mounts.enter_context(mounted("tmpfs", root / "tmpfs", "-t", "tmpfs"))
        (root / "tmpfs" / "t.txt").write_bytes(b"on tmpfs\n")
        mounts.enter_context(mounted("proc", root / "procfs", "-t", "proc"))
        yield base


@pytest.fixture(scope="module", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def confined(base: Path, mode: str) -> Iterator[FileTools]:
    with file_tools(base / "root", mode) as tools:
        yield tools


@pytest.fixture(scope="module")
def crossing(base: Path, mode: str) -> Iterator[FileTools]:
    with file_tools(base / "root", mode, cross_mounts=True) as tools:
        yield tools


MOUNTED_PATHS = [
    "bindout/secret.txt",
    "bindout/sub/deep.txt",
    "bindout/../ok.txt",
    "bindfile.txt",
    "tmpfs/t.txt",
    "procfs/self/environ",
    "procfs/self/mem",
    "procfs/self/maps",
    "procfs/1/cwd/x",
    "procfs/999999/cwd/x",
]


@pytest.mark.parametrize("path", MOUNTED_PATHS)
def test_mounts_are_not_crossed_by_default(confined: FileTools, path: str) -> None:
    answer = call(confined.read, {"relative_path": path})
    assert isinstance(answer, Problem), answer
    assert (answer.code, answer.detail) == (MCPErrorCode.ACCESS_DENIED, f"{path!r} {OUTSIDE}")


def test_the_root_itself_is_still_read(confined: FileTools) -> None:
    answer = call(confined.read, {"relative_path": "ok.txt"})
    assert isinstance(answer, dict)
    assert answer["content"] == "hello\n"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("bindout/secret.txt", CANARY),
        ("bindout/sub/deep.txt", CANARY),
        ("bindfile.txt", CANARY),
        ("tmpfs/t.txt", "on tmpfs\n"),
        # '..' out of a mount goes back to the directory it is mounted on, inside the root.
        ("bindout/../ok.txt", "hello\n"),
        ("tmpfs/../ok.txt", "hello\n"),
    ],
)
def test_mounts_are_crossed_when_the_operator_says_so(
    crossing: FileTools, path: str, expected: str
) -> None:
    answer = call(crossing.read, {"relative_path": path})
    assert isinstance(answer, dict), answer.detail
    assert answer["content"] == expected


PSEUDO = (
    "leads onto a kernel pseudo file system (procfs, sysfs, debugfs...), which the sandbox "
    "never reads, even where mounts are crossed"
)


@pytest.mark.parametrize(
    "path",
    [
        # On main, reading procfs/self/maps, then procfs/self/mem at an offset, gave the
        # server's own memory (the DSN's password) where mounts were crossed. Every path onto
        # a pseudo file system is refused the same way, magic links and plain ones alike.
        "procfs",
        "procfs/",
        "procfs/self/maps",
        "procfs/self/mem",
        "procfs/self/environ",
        "procfs/self/comm",
        "procfs/mounts",
        "procfs/self/cwd/ok.txt",
        "procfs/self/root/etc/hostname",
        "procfs/self/exe",
        "procfs/thread-self/cwd/ok.txt",
        "procfs/self/fd/0",
        "procfs/self/ns/net",
        "procfs/1/root/etc/hostname",
        "procfs/../procfs/self/maps",
        "tmpfs/../procfs/self/maps",
    ],
)
def test_pseudo_file_systems_are_refused_even_where_mounts_are_crossed(
    crossing: FileTools, path: str
) -> None:
    answer = call(crossing.read, {"relative_path": path})
    assert isinstance(answer, Problem), answer
    assert (answer.code, answer.detail) == (MCPErrorCode.ACCESS_DENIED, f"{path!r} {PSEUDO}")


def test_a_pseudo_file_system_is_not_listed_into_where_mounts_are_crossed(
    crossing: FileTools,
) -> None:
    answer = call(crossing.list, {"relative_path": "procfs/self"})
    assert isinstance(answer, Problem)
    assert answer.detail == f"'procfs/self' {PSEUDO}"
    top = call(crossing.list, {})
    assert isinstance(top, dict)
    entries = {entry["name"]: entry for entry in top["entries"]}
    assert entries["procfs"] == {"name": "procfs", "type": "other", "size": None, "modified": None}
    assert entries["tmpfs"]["type"] == "directory"


def test_a_listing_hides_what_is_mounted(confined: FileTools) -> None:
    answer = call(confined.list, {})
    assert isinstance(answer, dict), answer.detail
    entries = {entry["name"]: entry for entry in answer["entries"]}
    for name in ("bindout", "bindfile.txt", "tmpfs", "procfs"):
        assert entries[name] == {"name": name, "type": "other", "size": None, "modified": None}
    assert entries["ok.txt"]["type"] == "file"


@pytest.mark.parametrize("path", ["bindout", "tmpfs", "procfs"])
def test_a_mount_point_is_not_listed_into(confined: FileTools, path: str) -> None:
    answer = call(confined.list, {"relative_path": path})
    assert isinstance(answer, Problem)
    assert answer.detail == f"{path!r} {OUTSIDE}"


def test_a_listing_crosses_where_the_operator_says_so(crossing: FileTools) -> None:
    answer = call(crossing.list, {"relative_path": "bindout"})
    assert isinstance(answer, dict), answer.detail
    assert [entry["name"] for entry in answer["entries"]] == ["secret.txt", "sub"]
    top = call(crossing.list, {})
    assert isinstance(top, dict)
    assert {entry["name"]: entry["type"] for entry in top["entries"]}["bindout"] == "directory"
