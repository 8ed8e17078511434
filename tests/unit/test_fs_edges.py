"""The file tools where the system around them fails: /proc missing or odd, fstat failing,
the root closed under a listing, and the walk without mount IDs.

These are the branches no well-behaved machine takes; each is reached by injection, and each
must fail closed: a refusal, never a read.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import SandboxFSListParams
from mcp_server_suite.tools.fs import mounts, resolution
from mcp_server_suite.tools.fs.listing import build_list_tool
from mcp_server_suite.tools.fs.resolution import Resolver
from mcp_server_suite.tools.fs.root import open_root
from tests.support.fs_tools import complete


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (tmp_path / "sub").mkdir()
    return tmp_path


# --- /proc, as mounts.py reads it -----------------------------------------------------------


def test_no_proc_means_no_mount_ids_or_types(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_proc(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and path.startswith("/proc/"):
            raise FileNotFoundError(errno.ENOENT, "no /proc")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_proc)
    fd = real_open("/", os.O_PATH)
    try:
        assert mounts.mount_id(fd) is None
        assert mounts.filesystem_type(fd) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("fdinfo", "mountinfo", "expected"),
    [
        (b"pos:\t0\nflags:\t0\n", b"", None),
        (b"mnt_id:\t7\n", b"8 1 0:1 / / rw - ext4 /dev/a rw\n", None),
        (b"mnt_id:\t7\n", b"7 1 0:1 / / rw no separator here\n", None),
        (
            b"mnt_id:\t7\n",
            b"70 1 0:1 / / rw - xfs /dev/b rw\n7 1 0:1 / /x rw - btrfs /dev/c rw\n",
            "btrfs",
        ),
    ],
)
def test_mountinfo_lines_are_matched_by_mount_id(
    monkeypatch: pytest.MonkeyPatch, fdinfo: bytes, mountinfo: bytes, expected: str | None
) -> None:
    def fake(path: str) -> bytes:
        return fdinfo if "fdinfo" in path else mountinfo

    monkeypatch.setattr(mounts, "_read_proc", fake)
    assert mounts.filesystem_type(0) == expected


def test_proc_reopen_is_off_where_proc_cannot_open_the_root(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_proc_fd(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and path.startswith("/proc/self/fd/"):
            raise PermissionError(errno.EACCES, "denied")
        return real_open(path, flags, *args, **kwargs)

    opened = open_root(root)
    try:
        monkeypatch.setattr(os, "open", no_proc_fd)
        assert not Resolver.probe(opened, cross_mounts=False).proc_reopen
    finally:
        opened.close()


@pytest.mark.parametrize(("setting", "expected"), [(b"1\n", True), (b"0\n", False), (None, False)])
def test_protected_symlinks_is_read_from_proc(
    monkeypatch: pytest.MonkeyPatch, setting: bytes | None, expected: bool
) -> None:
    real_open = builtins.open

    def fake_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if path == "/proc/sys/fs/protected_symlinks":
            if setting is None:
                raise FileNotFoundError(errno.ENOENT, "no /proc/sys")
            return io.BytesIO(setting)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert resolution._protected_symlinks() is expected


# --- the walk without mount IDs, and links owned by others --------------------------------


def walk_resolver(root: Path, **overrides: Any) -> tuple[Resolver, Any]:
    opened = open_root(root)
    probed = Resolver.probe(opened, cross_mounts=False, use_kernel=False)
    fields: dict[str, Any] = {
        "cross_mounts": False,
        "kernel": False,
        "cached": False,
        "proc_reopen": True,
        "root_status": os.stat(root),
        "root_mount": probed._root_mount,
        "root_filesystem": probed.root_filesystem,
        "protected_symlinks": False,
        **overrides,
    }
    return Resolver(opened, **fields), opened


def test_without_mount_ids_the_walk_tells_file_systems_apart_by_device(root: Path) -> None:
    real = os.stat(root)
    elsewhere = os.stat_result((*real[:2], real.st_dev + 1, *real[3:]))
    resolver, opened = walk_resolver(root, root_mount=None, root_status=elsewhere)
    fd = opened.acquire()
    try:
        with pytest.raises(OSError, match="another file system"):
            resolver.resolve(fd, "ok.txt")
    finally:
        opened.release()
        opened.close()


def test_without_mount_ids_the_same_device_is_beneath_the_root(root: Path) -> None:
    resolver, opened = walk_resolver(root, root_mount=None)
    fd = opened.acquire()
    try:
        resolved = resolver.resolve(fd, "sub/../ok.txt")
        assert resolved.names == ("ok.txt",)
        resolved.close()
    finally:
        opened.release()
        opened.close()


@pytest.mark.root
def test_a_link_owned_by_another_user_outside_a_sticky_directory_is_followed(root: Path) -> None:
    (root / "theirs").symlink_to("ok.txt")
    os.lchown(root / "theirs", 65534, 65534)
    resolver, opened = walk_resolver(root, protected_symlinks=True)
    fd = opened.acquire()
    try:
        resolved = resolver.resolve(fd, "theirs")
        assert resolved.names == ("ok.txt",)
        resolved.close()
    finally:
        opened.release()
        opened.close()


@pytest.mark.parametrize(
    ("mode", "path"), [("kernel", "ok.txt"), ("walk", "ok.txt"), ("walk", "sub")]
)
def test_a_failing_fstat_closes_what_it_opened(
    root: Path, monkeypatch: pytest.MonkeyPatch, mode: str, path: str
) -> None:
    resolver, opened = walk_resolver(root, kernel=mode == "kernel")
    real_fstat = os.fstat
    calls = []

    # The kernel's lookup is stated once; the walk stats each component, and a path that
    # ends on a directory once more: the last stat of the lookup is the one that fails.
    failing_call = 2 if path == "sub" else 1

    def failing(fd: int) -> os.stat_result:
        calls.append(fd)
        if len(calls) == failing_call:
            raise OSError(errno.EIO, "Input/output error")
        return real_fstat(fd)

    fd = opened.acquire()
    before = set(os.listdir("/proc/self/fd"))
    try:
        monkeypatch.setattr(os, "fstat", failing)
        with pytest.raises(OSError, match="Input/output error"):
            resolver.resolve(fd, path)
        monkeypatch.undo()
        assert set(os.listdir("/proc/self/fd")) == before
    finally:
        opened.release()
        opened.close()


# --- the listing tool's own edges ---------------------------------------------------------


def test_a_listing_of_a_closed_root_is_refused(root: Path) -> None:
    tool = build_list_tool(Settings(safe_data_dir=root))
    assert tool.close is not None
    complete(tool.close())
    with pytest.raises(ToolFailure) as info:
        complete(tool.run(SandboxFSListParams()))
    assert info.value.problem.detail == "The sandbox is closed because the server is shutting down."


def test_the_listing_tool_needs_a_root() -> None:
    with pytest.raises(ConfigError):
        build_list_tool(Settings())
