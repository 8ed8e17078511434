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
from mcp_server_suite.tools.fs import _syscalls, mounts, resolution
from mcp_server_suite.tools.fs._refusals import MountsUnknown
from mcp_server_suite.tools.fs.listing import build_list_tool
from mcp_server_suite.tools.fs.resolution import Resolver
from mcp_server_suite.tools.fs.root import open_root
from mcp_server_suite.tools.fs.walk import Walk
from tests.support.fs_tools import complete


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (tmp_path / "sub").mkdir()
    return tmp_path


# --- mount IDs and file system types, as mounts.py finds them --------------------------------


def test_every_source_gives_the_same_mount_id(root: Path) -> None:
    fd = os.open(root, os.O_PATH)
    try:
        found = {source: mounts.mount_id(fd, source) for source in mounts.MountIDs}
    finally:
        os.close(fd)
    assert len(set(found.values())) == 1, found
    assert None not in found.values()


def test_the_first_source_that_answers_is_chosen(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(fd: int) -> int:
        raise OSError(errno.ENOSYS, "no statx mount IDs")

    fd = os.open(root, os.O_PATH)
    try:
        assert mounts.probe_mount_ids(fd) is not None
        assert mounts.probe_mount_ids(fd)[0] is mounts.MountIDs.STATX  # type: ignore[index]
        monkeypatch.setattr(_syscalls, "statx_mount_id", refused)
        assert mounts.probe_mount_ids(fd)[0] is mounts.MountIDs.HANDLE  # type: ignore[index]
        monkeypatch.setattr(_syscalls, "handle_mount_id", refused)
        assert mounts.probe_mount_ids(fd)[0] is mounts.MountIDs.FDINFO  # type: ignore[index]
        monkeypatch.setattr(mounts, "_fdinfo_mount_id", lambda fd: None)
        assert mounts.probe_mount_ids(fd) is None
    finally:
        os.close(fd)


def test_file_handles_cannot_tell_a_pseudo_file_system() -> None:
    fd = os.open("/proc", os.O_PATH)
    try:
        assert mounts.mount_id(fd, mounts.MountIDs.HANDLE) is None
        assert mounts.filesystem_type(fd) == "proc"
    finally:
        os.close(fd)


def test_a_missing_proc_means_no_fdinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_proc(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and path.startswith("/proc/"):
            raise FileNotFoundError(errno.ENOENT, "no /proc")
        return real_open(path, flags, *args, **kwargs)

    fd = real_open("/", os.O_PATH)
    try:
        monkeypatch.setattr(os, "open", no_proc)
        assert mounts.mount_id(fd, mounts.MountIDs.FDINFO) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("source", list(mounts.MountIDs))
def test_a_shortage_is_never_an_answer_about_the_mount(
    monkeypatch: pytest.MonkeyPatch, source: mounts.MountIDs
) -> None:
    # On main, fdinfo that could not be opened (EMFILE) was "another mount": EXDEV.
    def short(*args: Any, **kwargs: Any) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(_syscalls, "statx_mount_id", short)
    monkeypatch.setattr(_syscalls, "handle_mount_id", short)
    monkeypatch.setattr(os, "read", short)
    fd = os.open("/", os.O_PATH)
    try:
        with pytest.raises(OSError, match="Too many open files"):
            mounts.mount_id(fd, source)
    finally:
        os.close(fd)


def test_an_unnamed_file_system_type_is_its_magic_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_syscalls, "filesystem_magic", lambda fd: 0x12345678)
    assert mounts.filesystem_type(0) == "0x12345678"


@pytest.mark.parametrize("name", ["statx", "name_to_handle_at", "fstatfs"])
def test_a_c_library_without_the_call_is_a_kernel_without_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    call = {
        "statx": _syscalls.statx_mount_id,
        "name_to_handle_at": _syscalls.handle_mount_id,
        "fstatfs": _syscalls.filesystem_magic,
    }[name]
    monkeypatch.setattr(_syscalls, f"_{name}", None)
    with pytest.raises(OSError, match="not in this C library") as info:
        call(0)
    assert info.value.errno == errno.ENOSYS


def test_a_kernel_whose_statx_reports_no_mount_id_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before Linux 5.8 statx answers, with STATX_MNT_ID left out of the mask it reports.
    monkeypatch.setattr(_syscalls, "_statx", lambda *args: 0)
    with pytest.raises(OSError, match=r"no mount ID before Linux 5\.8") as info:
        _syscalls.statx_mount_id(0)
    assert info.value.errno == errno.ENOSYS


def test_fdinfo_without_a_mount_id_tells_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "read", lambda fd, size: b"pos:\t0\nflags:\t0\n")
    fd = os.open("/", os.O_PATH)
    try:
        assert mounts.mount_id(fd, mounts.MountIDs.FDINFO) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("path", ["/proc", "/sys", "/dev/pts"])
def test_a_root_on_a_pseudo_file_system_is_a_config_error(path: str) -> None:
    with pytest.raises(ConfigError, match="MCP_SAFE_DATA_DIR"):
        build_list_tool(Settings(safe_data_dir=Path(path)))


def test_a_system_that_cannot_tell_mounts_says_so_at_start(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(resolution, "probe_mount_ids", lambda fd: None)
    with caplog.at_level("ERROR", logger="mcp_server_suite.tools.fs"):
        tool = build_list_tool(Settings(safe_data_dir=root))
    assert "mount points beneath the root cannot be told apart" in caplog.text
    assert tool.close is not None
    complete(tool.close())


def test_the_calls_report_the_kernel_s_errno() -> None:
    for call in (_syscalls.statx_mount_id, _syscalls.handle_mount_id, _syscalls.filesystem_magic):
        with pytest.raises(OSError, match="Bad file descriptor") as info:
            call(-1)
        assert info.value.errno == errno.EBADF


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
        "mounts": probed.mounts,
        "root_filesystem": probed.root_filesystem,
        "protected_symlinks": False,
        **overrides,
    }
    return Resolver(opened, **fields), opened


def test_without_mount_ids_another_device_is_outside(root: Path) -> None:
    real = os.stat(root)
    elsewhere = os.stat_result((*real[:2], real.st_dev + 1, *real[3:]))
    resolver, opened = walk_resolver(root, mounts=None, root_status=elsewhere)
    fd = opened.acquire()
    try:
        with pytest.raises(OSError, match="another file system"):
            resolver.resolve(fd, "ok.txt")
    finally:
        opened.release()
        opened.close()


def test_without_mount_ids_the_same_device_is_refused_not_guessed(root: Path) -> None:
    # On main, the walk without /proc took the same device for the same mount, and read a
    # bind mount of an outside directory of the same file system.
    resolver, opened = walk_resolver(root, mounts=None)
    fd = opened.acquire()
    try:
        with pytest.raises(MountsUnknown):
            resolver.resolve(fd, "sub/../ok.txt")
        itself = resolver.resolve(fd, ".")
        assert itself.names == ()
        itself.close()
    finally:
        opened.release()
        opened.close()


def test_a_source_that_cannot_tell_one_descriptor_refuses_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver, opened = walk_resolver(root)
    monkeypatch.setattr(resolution, "mount_id", lambda fd, source: None)
    fd = opened.acquire()
    try:
        with pytest.raises(MountsUnknown):
            resolver.resolve(fd, "ok.txt")
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


@pytest.mark.parametrize("where", ["entry", "link", "base"])
def test_a_shortage_while_listing_is_answered_as_one(
    root: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    (root / "link").symlink_to("ok.txt")

    def short(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    tool = build_list_tool(Settings(safe_data_dir=root, metrics_enabled=False))
    lister = tool.run.__self__  # type: ignore[attr-defined]  # A bound method.
    if where == "entry":
        monkeypatch.setattr(lister._resolver, "entry_status", short)
    elif where == "link":
        monkeypatch.setattr(Walk, "run", short)
    else:
        monkeypatch.setattr(Walk, "enter", short)
    try:
        with pytest.raises(ToolFailure) as info:
            complete(tool.run(SandboxFSListParams()))
    finally:
        assert tool.close is not None
        complete(tool.close())
    assert info.value.problem.metadata == {"retryable": True}


def test_a_directory_changed_before_its_links_are_resolved_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "sub" / "link").symlink_to("../ok.txt")
    tool = build_list_tool(Settings(safe_data_dir=root, metrics_enabled=False))
    real_enter = Walk.enter

    def swapped(self: Walk, names: tuple[str, ...], identity: tuple[int, int]) -> None:
        os.rename(root / "sub", root / "was_sub")
        (root / "sub").mkdir()
        real_enter(self, names, identity)

    monkeypatch.setattr(Walk, "enter", swapped)
    try:
        with pytest.raises(ToolFailure) as info:
            complete(tool.run(SandboxFSListParams(relative_path="sub")))
    finally:
        assert tool.close is not None
        complete(tool.close())
    assert info.value.problem.detail == "'sub' changed while it was being read; try again"


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
