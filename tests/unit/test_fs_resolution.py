"""Resolution: how the server chooses a resolver, and the kernel's rules the walk keeps.

Most answers are checked with both resolvers elsewhere (`test_fs_read.py`, the corpus, the
properties). Here: the probe (the walk is chosen when the kernel answers ENOSYS, for real,
without seccomp), the lookups the kernel races with renames, the naming of paths through
links, reopening by name where /proc is missing, and the rules the walk mirrors from the
kernel (link counting, `protected_symlinks`, magic links, canonical paths past PATH_MAX).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import resource
import stat
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.config import Settings
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools.fs import _openat2, resolution
from mcp_server_suite.tools.fs.read import build_read_tool
from mcp_server_suite.tools.fs.resolution import (
    MAX_RESOLVED_CHARS,
    MAX_SYMLINKS,
    Resolver,
    relative_beneath,
)
from mcp_server_suite.tools.fs.root import open_root
from tests.support.fs_tools import MODES, FileTools, call, file_tools, reader_of
from tests.support.fs_tree import remove_deep_tree

OUTSIDE = "resolves outside the sandbox"
LOOP = "meets more than 40 symbolic links (a loop), or a /proc link the sandbox never follows"
CHANGED = "changed while it was being read; try again"
TOO_LONG = "has a name, or resolves to a path, longer than the file system or the sandbox allows"

# A system call number no kernel has: asking for it gets ENOSYS from the kernel itself,
# as a kernel older than openat2 answers, with no seccomp filter involved.
UNUSED_SYSCALL = 1023


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.txt").write_bytes(b"inner\n")
    (tmp_path / "link").symlink_to("sub/inner.txt")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def problem(tools: FileTools, path: str) -> Problem:
    answer = call(tools.read, {"relative_path": path})
    assert isinstance(answer, Problem), answer
    return answer


def content(tools: FileTools, path: str) -> str:
    answer = call(tools.read, {"relative_path": path})
    assert isinstance(answer, dict), answer.detail
    text: str = answer["content"]
    return text


# --- choosing a resolver -------------------------------------------------------------------


# --- the system call itself ----------------------------------------------------------------


def test_openat2_passes_every_argument_as_the_kernel_reads_it(root: Path) -> None:
    # ctypes calls syscall(2) without argtypes (`_openat2`): each argument must still reach
    # the kernel whole. The descriptor: a low one, the highest the limit allows, and AT_FDCWD
    # (negative); the flags and resolve bits: what the kernel acted on; the size: the kernel
    # accepts the structure.
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        numbers = [root_fd, hard - 1]
        for number in numbers:
            dir_fd = root_fd if number == root_fd else os.dup2(root_fd, number)
            try:
                fd = _openat2.openat2(dir_fd, b"sub/inner.txt", os.O_RDONLY | os.O_CLOEXEC, 0)
                try:
                    assert os.read(fd, 100) == b"inner\n"
                    assert os.get_inheritable(fd) is False  # O_CLOEXEC reached the kernel
                finally:
                    os.close(fd)
                with pytest.raises(OSError, match="Invalid cross-device link") as beneath:
                    _openat2.openat2(dir_fd, b"../x", os.O_PATH, _openat2.RESOLVE_BENEATH)
                assert beneath.value.errno == errno.EXDEV
                with pytest.raises(OSError, match="Too many levels of symbolic links") as no_links:
                    _openat2.openat2(dir_fd, b"link", os.O_PATH, _openat2.RESOLVE_NO_SYMLINKS)
                assert no_links.value.errno == errno.ELOOP
            finally:
                if number != root_fd:
                    os.close(number)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        os.close(root_fd)
    at_cwd = -100
    previous = os.getcwd()
    os.chdir(root)
    try:
        fd = _openat2.openat2(at_cwd, b"ok.txt", os.O_RDONLY | os.O_CLOEXEC, 0)
        try:
            assert os.read(fd, 100) == b"hello\n"
        finally:
            os.close(fd)
    finally:
        os.chdir(previous)
    with pytest.raises(OSError, match="No such file or directory") as missing:
        _openat2.openat2(at_cwd, str(root / "absent").encode(), os.O_PATH, 0)
    assert missing.value.errno == errno.ENOENT


def test_the_kernel_resolves_where_it_has_openat2(root: Path) -> None:
    with file_tools(root, "kernel") as tools:
        resolver = tools.reader._resolver
        assert (resolver.kernel, resolver.cached, resolver.proc_reopen) == (True, True, True)
        assert tools.reader.reads_inline


def test_the_walk_is_chosen_when_the_kernel_answers_enosys(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_openat2, "_NUMBER", ctypes.c_long(UNUSED_SYSCALL))
    with pytest.raises(OSError, match="Function not implemented") as info:
        _openat2.openat2(-100, b".", os.O_PATH, 0)
    assert info.value.errno == errno.ENOSYS
    with caplog.at_level(logging.WARNING, logger="mcp_server_suite.tools.fs"):
        tool = build_read_tool(Settings(safe_data_dir=root))
    reader = reader_of(tool)
    assert not reader._resolver.kernel
    assert not reader.reads_inline
    assert "the kernel has no openat2 (Linux 5.6 added it)" in caplog.text
    assert "paths are resolved by the O_NOFOLLOW walk" in caplog.text
    tools = FileTools(tool, tool)
    assert content(tools, "link") == "inner\n"
    assert problem(tools, "../x").detail == f"'../x' {OUTSIDE}"


def test_an_architecture_without_the_call_uses_the_walk(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_openat2, "_NUMBER", None)
    assert not reader_of(build_read_tool(Settings(safe_data_dir=root)))._resolver.kernel


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (errno.EPERM, "a seccomp filter refuses openat2"),
        (errno.EINVAL, "openat2 fails with EINVAL"),
    ],
)
def test_a_refused_openat2_means_the_walk(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: int,
    reason: str,
) -> None:
    def refused(*args: Any) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(_openat2, "openat2", refused)
    with caplog.at_level(logging.WARNING, logger="mcp_server_suite.tools.fs"):
        resolver = reader_of(build_read_tool(Settings(safe_data_dir=root)))._resolver
    assert not resolver.kernel
    assert reason in caplog.text


def test_a_kernel_without_cached_lookups_reads_in_worker_threads(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _openat2.openat2

    def no_cached(dir_fd: int, path: bytes, flags: int, resolve: int) -> int:
        if resolve & _openat2.RESOLVE_CACHED:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(dir_fd, path, flags, resolve)

    monkeypatch.setattr(_openat2, "openat2", no_cached)
    tool = build_read_tool(Settings(safe_data_dir=root))
    reader = reader_of(tool)
    assert reader._resolver.kernel
    assert not reader._resolver.cached
    assert not reader.reads_inline
    assert content(FileTools(tool, tool), "ok.txt") == "hello\n"


# --- without /proc ---------------------------------------------------------------------------


@pytest.fixture
def without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolution, "_probe_proc_reopen", lambda fd, status: False)


def test_without_proc_files_are_reopened_by_name(
    root: Path, without_proc: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_server_suite.tools.fs"):
        tool = build_read_tool(Settings(safe_data_dir=root))
    assert "/proc/self/fd is not available" in caplog.text
    tools = FileTools(tool, tool)
    assert not tools.reader.reads_inline
    assert content(tools, "link") == "inner\n"
    assert problem(tools, "fifo").code is MCPErrorCode.ACCESS_DENIED
    assert problem(tools, "sub").detail == "'sub' names a directory, not a file"


def test_without_proc_a_name_swapped_before_the_reopen_is_refused(
    root: Path, without_proc: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = build_read_tool(Settings(safe_data_dir=root))
    real_open = os.open
    swapped: list[bool] = []

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        reopening = flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_PATH
        if path == "ok.txt" and reopening and not swapped:
            os.rename(root / "ok.txt", root / "was_ok.txt")
            (root / "ok.txt").write_bytes(b"another file\n")
            swapped.append(True)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    answer = problem(FileTools(tool, tool), "ok.txt")
    assert (answer.code, answer.detail) == (MCPErrorCode.ACCESS_DENIED, f"'ok.txt' {CHANGED}")


# --- races the kernel reports --------------------------------------------------------------


def failing_openat2(monkeypatch: pytest.MonkeyPatch, failures: list[int]) -> None:
    real = _openat2.openat2

    def flaky(dir_fd: int, path: bytes, flags: int, resolve: int) -> int:
        if failures and not resolve & _openat2.RESOLVE_CACHED:
            error = failures.pop(0)
            raise OSError(error, os.strerror(error))
        return real(dir_fd, path, flags, resolve)

    monkeypatch.setattr(_openat2, "openat2", flaky)


@pytest.mark.parametrize("path", ["ok.txt", "link"])
def test_a_lookup_raced_by_a_rename_is_tried_again(
    root: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    with file_tools(root, "kernel") as tools:
        # The first lookup says there is a link; the two after it are raced once each.
        failures = [errno.EAGAIN] if path == "ok.txt" else [errno.ELOOP, errno.EAGAIN]
        failing_openat2(monkeypatch, failures)
        monkeypatch.setattr(tools.reader, "_inline", False)
        assert content(tools, path) in ("hello\n", "inner\n")


@pytest.mark.parametrize("links", [False, True])
def test_a_lookup_that_keeps_racing_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    with file_tools(root, "kernel") as tools:
        failing_openat2(monkeypatch, ([errno.ELOOP] if links else []) + [errno.EAGAIN] * 3)
        monkeypatch.setattr(tools.reader, "_inline", False)
        answer = problem(tools, "link")
    assert (answer.code, answer.detail) == (MCPErrorCode.ACCESS_DENIED, f"'link' {CHANGED}")


def test_a_path_through_links_must_name_what_the_kernel_opened(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel opens, the walk names: if a swap between the two makes them reach
    # different inodes, neither answer is given.
    with file_tools(root, "kernel") as tools:
        resolver = tools.reader._resolver
        real_walk = resolver.walk

        def swap_then_walk(root_fd: int, relative: str, *, keep_parent: bool) -> Any:
            os.rename(root / "sub" / "inner.txt", root / "sub" / "was_inner.txt")
            (root / "sub" / "inner.txt").write_bytes(b"another\n")
            return real_walk(root_fd, relative, keep_parent=keep_parent)

        monkeypatch.setattr(resolver, "walk", swap_then_walk)
        monkeypatch.setattr(tools.reader, "_inline", False)
        answer = problem(tools, "link")
    assert answer.detail == f"'link' {CHANGED}"


def test_a_failed_walk_after_the_kernel_opened_closes_everything(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with file_tools(root, "kernel") as tools:
        resolver = tools.reader._resolver

        def vanishing(root_fd: int, relative: str, *, keep_parent: bool) -> Any:
            raise OSError(errno.ENOENT, "gone")

        monkeypatch.setattr(resolver, "walk", vanishing)
        monkeypatch.setattr(tools.reader, "_inline", False)
        before = set(os.listdir("/proc/self/fd"))
        assert problem(tools, "link").detail == "'link' does not exist"
        assert set(os.listdir("/proc/self/fd")) == before


# --- the kernel's rules, as the walk keeps them ----------------------------------------------


@pytest.fixture
def links(tmp_path: Path) -> Path:
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (tmp_path / "me").symlink_to(".")
    for prefix, length in (("ok", MAX_SYMLINKS), ("long", MAX_SYMLINKS + 1)):
        for index in range(length - 1):
            (tmp_path / f"{prefix}{index}").symlink_to(f"{prefix}{index + 1}")
        (tmp_path / f"{prefix}{length - 1}").symlink_to("ok.txt")
    (tmp_path / "ts_slash").symlink_to("ok.txt/")
    (tmp_path / "ts_dot").symlink_to("ok.txt/.")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("ok0", "hello\n"),
        ("long0", LOOP),
        # Every link met counts, the same one again included: 40 '.' links are followed,
        # 41 are not, as in the kernel (on main, `me/` 100 times was read).
        ("me/" * MAX_SYMLINKS + "ok.txt", "hello\n"),
        ("me/" * (MAX_SYMLINKS + 1) + "ok.txt", LOOP),
        ("me/" * 100 + "ok.txt", LOOP),
        ("ts_slash", "has a component that is not a directory"),
        ("ts_dot", "has a component that is not a directory"),
    ],
)
def test_links_count_and_end_as_the_kernel_says(
    links: Path, mode: str, path: str, expected: str
) -> None:
    with file_tools(links, mode) as tools:
        answer = call(tools.read, {"relative_path": path})
    if isinstance(answer, Problem):
        assert answer.detail.endswith(expected)
    else:
        assert answer["content"] == expected


@pytest.mark.root
def test_the_walk_mirrors_protected_symlinks(tmp_path: Path) -> None:
    # fs.protected_symlinks: in a sticky, world-writable directory, the kernel follows a
    # link only for its owner or the directory's. The sysctl is off on this host (and global,
    # so the test does not turn it on): the walk is built as if it were on.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (shared / "theirs").symlink_to("../ok.txt")
    os.lchown(shared / "theirs", 65534, 65534)
    (shared / "mine").symlink_to("../ok.txt")
    root = open_root(tmp_path)
    try:
        probed = Resolver.probe(root, cross_mounts=False, use_kernel=False)
        resolver = Resolver(
            root,
            cross_mounts=False,
            kernel=False,
            cached=False,
            proc_reopen=True,
            root_status=os.stat(tmp_path),
            mounts=probed.mounts,
            root_filesystem=probed.root_filesystem,
            protected_symlinks=True,
        )
        fd = root.acquire()
        try:
            with pytest.raises(PermissionError, match="protected_symlinks") as info:
                resolver.resolve(fd, "shared/theirs")
            assert info.value.errno == errno.EACCES
            resolver.resolve(fd, "shared/mine").close()
        finally:
            root.release()
    finally:
        root.close()


def test_a_canonical_path_past_the_bound_is_refused(tmp_path: Path, mode: str) -> None:
    # Links can make a short path's canonical form as long as 40 targets of 4,095 bytes;
    # the walk stops past MAX_RESOLVED_CHARS.
    name = "n" * 250
    levels = MAX_RESOLVED_CHARS // (len(name) + 1) + 2
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    hops = []
    try:
        for level in range(levels):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            if level % 15 == 14:
                hops.append(level)
        leaf = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.close(leaf)
    finally:
        os.close(fd)
    # Links of 15 levels each, chained: l0 leads 15 levels down, where l1 leads 15 more...
    _chain_links(tmp_path, name, hops)
    path = (
        "/".join(f"l{index}" for index in range(len(hops)))
        + "/"
        + "/".join([name] * (levels - hops[-1] - 1))
        + "/f"
    )
    try:
        with file_tools(tmp_path, mode) as tools:
            answer = problem(tools, path)
        assert answer.detail.endswith(TOO_LONG)
    finally:
        remove_deep_tree(tmp_path, name)


def _chain_links(top: Path, name: str, hops: list[int]) -> None:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        depth = 0
        for index, level in enumerate(hops):
            os.symlink("/".join([name] * (level + 1 - depth)), f"l{index}", dir_fd=fd)
            for _ in range(level + 1 - depth):
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = inner
            depth = level + 1
    finally:
        os.close(fd)


# --- absolute paths ----------------------------------------------------------------------

ROOT_NAMES = ("srv", "data")


@pytest.mark.parametrize(
    ("path", "relative"),
    [
        ("ok.txt", "ok.txt"),
        ("/srv/data/ok.txt", "ok.txt"),
        ("//srv/./data//ok.txt", "ok.txt"),
        ("/srv/data", "."),
        ("/srv/data/", "."),
        ("/srv/data//", "."),
        ("/srv/data/ok.txt/", "ok.txt/"),
        ("/srv/data/../data/ok.txt", "../data/ok.txt"),
    ],
)
def test_an_absolute_path_names_the_root_by_components(path: str, relative: str) -> None:
    assert relative_beneath(path, ROOT_NAMES) == relative


@pytest.mark.parametrize(
    "path", ["/", "/srv", "/srv/data_evil/x", "/srv/../srv/data/x", "/other/data/x", "/srv/dat"]
)
def test_an_absolute_path_elsewhere_is_outside(path: str) -> None:
    with pytest.raises(OSError, match="outside the root") as info:
        relative_beneath(path, ROOT_NAMES)
    assert info.value.errno == errno.EXDEV


def test_a_root_at_the_top_of_the_file_system_takes_every_absolute_path() -> None:
    assert relative_beneath("/etc/hostname", ()) == "etc/hostname"
    assert relative_beneath("/", ()) == "."


def test_entry_status_does_not_follow_links(root: Path, mode: str) -> None:
    with file_tools(root, mode) as tools:
        resolver = tools.reader._resolver
        fd = tools.reader._root.acquire()
        try:
            assert stat.S_ISLNK(resolver.entry_status(fd, "link").st_mode)
            assert stat.S_ISFIFO(resolver.entry_status(fd, "fifo").st_mode)
        finally:
            tools.reader._root.release()
