"""`sandbox_fs_read`: bounded text reads confined to one directory tree.

The design document's five enforcement steps, in the order they run:

1. Canonical containment. The caller's path is joined to the canonical root and resolved
   with `os.path.realpath` (non-strict: every symlink is followed, missing components are
   kept), and the result must lie beneath the root by whole path components, never by string
   prefix. A path outside is refused whether or not it exists, so nothing outside can be
   probed. An absolute path is accepted only if it lies beneath the canonical root by
   components before any resolution; it is then read like the rest of the path after the root.
2. Race-free open. The resolved path is opened again one component at a time, each with
   `openat` relative to the previous directory's descriptor and `O_NOFOLLOW`, starting from
   the root's descriptor. Step 1 already followed every symlink that stays inside, so the
   walk meets a symlink only when a loop stopped the resolution or the tree changed since
   step 1; both are refused. The walk never opens `..`, so by itself it keeps every read
   beneath the root's descriptor: step 1 decides which inside symlinks are followed and
   what the caller is told.
3. File type. The leaf's type is checked before it is opened, so a FIFO or device is never
   opened; the leaf is opened `O_NONBLOCK | O_NOCTTY` and checked again with `fstat` on the
   open descriptor, which is the check that counts. Only regular files are read.
4. Bounded read. At most `max_bytes + 1` bytes are read, in a worker thread, then strictly
   decoded. A character cut by `max_bytes` is dropped and not counted in `bytes_read`.
5. No path leaks. A problem quotes at most 256 characters of the caller's own path, and
   never an absolute path, the root, or the text of an OS error.

Every error fails closed: after a failed check nothing is opened, by name or otherwise, and
every descriptor a read opens is closed before the read returns.
"""

import codecs
import enum
import errno
import logging
import os
import stat
import threading
from collections.abc import Mapping
from typing import Final

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import SandboxFSReadParams, SandboxFSReadResult
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.fs.root import DIRECTORY_FLAGS, OpenedRoot, open_root
from mcp_server_suite.workers import run_blocking

__all__ = ["DESCRIPTION", "MAX_ECHO_CHARS", "MAX_SYMLINKS", "SandboxRoot", "build_fs_tool"]

logger = logging.getLogger(__name__)

DESCRIPTION: Final = (
    "Read a text file from the sandbox directory. relative_path is relative to the sandbox "
    "root; symbolic links are followed only while they stay inside it. Paths outside the "
    "sandbox, directories, FIFOs, sockets and devices are refused. At most max_bytes bytes "
    "are read and strictly decoded with encoding; truncated says the file is longer."
)

# The design document's bound on how much of the caller's path a problem may quote.
MAX_ECHO_CHARS: Final = 256

# Linux's MAXSYMLINKS: the most symbolic links the kernel follows in one path lookup.
MAX_SYMLINKS: Final = 40

# The leaf: O_NOFOLLOW refuses a symlink (ELOOP), O_NONBLOCK keeps a FIFO from blocking the
# open, and O_NOCTTY keeps a terminal from becoming the process's controlling terminal.
_LEAF_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# A path whose last piece is one of these names a directory, never a regular file; POSIX
# would fail it with ENOTDIR after a file (`ok.txt/.`), which realpath's lexical '..' and
# trailing-slash handling would otherwise hide.
_NOT_A_FILE_NAME: Final = frozenset({"", ".", ".."})

# Pieces of a path that do not change what it names: the empty piece between doubled or
# trailing slashes, and '.'.
_NO_OP_NAMES: Final = frozenset({"", "."})

_SPECIAL_FILE: Final = "is not a regular file (it is a FIFO, socket or device) and is not read"
_LINK_MET: Final = (
    "meets a symbolic link loop, or one of its components changed while it was being read"
)
_PERMISSION: Final = "cannot be read: permission denied"

# How each OS error a read can meet becomes a problem. Errors the caller can fix by asking
# for another path are validation errors; refusals of what exists are access denials. Any
# errno not listed is a server-side fault, reported generically.
_OS_ERRORS: Final[Mapping[int, tuple[MCPErrorCode, str]]] = {
    errno.ENOENT: (MCPErrorCode.VALIDATION_ERROR, "does not exist"),
    errno.ENOTDIR: (MCPErrorCode.VALIDATION_ERROR, "has a component that is not a directory"),
    errno.EISDIR: (MCPErrorCode.VALIDATION_ERROR, "names a directory, not a file"),
    errno.ENAMETOOLONG: (
        MCPErrorCode.VALIDATION_ERROR,
        "has a name longer than the file system allows",
    ),
    errno.ELOOP: (MCPErrorCode.ACCESS_DENIED, _LINK_MET),
    errno.EACCES: (MCPErrorCode.ACCESS_DENIED, _PERMISSION),
    errno.EPERM: (MCPErrorCode.ACCESS_DENIED, _PERMISSION),
    # open(2) reports ENXIO for a socket and for a device without a driver, ENODEV for some
    # devices: special files that replaced a regular file after the type check.
    errno.ENXIO: (MCPErrorCode.ACCESS_DENIED, _SPECIAL_FILE),
    errno.ENODEV: (MCPErrorCode.ACCESS_DENIED, _SPECIAL_FILE),
}


def _components(path: str) -> list[str]:
    # Containment is decided on these lists, name by name, as PurePath.is_relative_to does
    # (without building PurePath objects, which cost more than the rest of the check): a
    # sibling such as '/data_evil' never matches a root of '/data'.
    return [name for name in path.split("/") if name not in _NO_OP_NAMES]


def _realpath(base: str, relative: str) -> str:
    """`os.path.realpath(os.path.join(base, relative))` (non-strict), the same on every Python.

    The standard library's version changed between releases: 3.11 recurses once per nested
    symlink and fails at the recursion limit, 3.13 follows a chain of any length and hides
    `readlink` errors. This one follows Python 3.13's rules for what a path means (missing
    components kept, `..` applied to what was resolved so far, a symlink met again while it
    is being resolved left as it is, which is a loop), and adds two of its own: like the
    kernel, it follows at most `MAX_SYMLINKS` links, and a symlink that changes while it is
    being read is an error, not a name to keep.

    Args:
        base: A canonical absolute directory (the sandbox root): its own components are
            known to hold no symlink, so resolution starts beneath it.
        relative: The path to resolve from `base`.

    Returns:
        The canonical path.

    Raises:
        OSError: ELOOP after `MAX_SYMLINKS` links; `readlink`'s error when a symlink changed
            between `lstat` and `readlink`.
    """
    # Names still to resolve, last first. A None marks the end of a symlink's target: the
    # name under it is the symlink, whose resolution is then known.
    pending: list[str | None] = list(reversed(relative.split("/")))
    resolved = base
    # Each symlink met: None while its target is being resolved, then where it led.
    links: dict[str, str | None] = {}
    followed = 0
    while pending:
        name = pending.pop()
        if name is None:
            link = pending.pop()
            links[str(link)] = resolved
            continue
        if name in _NO_OP_NAMES:
            continue
        if name == "..":
            resolved = resolved.rpartition("/")[0] or "/"
            continue
        candidate = f"{resolved.rstrip('/')}/{name}"
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            is_link = False
        if not is_link:
            resolved = candidate
            continue
        if candidate in links:
            # Met before: reuse where it led, or keep it as it is if it is still being
            # resolved (a loop, which the walk will refuse).
            resolved = links[candidate] or candidate
            continue
        followed += 1
        if followed > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links")
        target = os.readlink(candidate)
        links[candidate] = None
        if target.startswith("/"):
            resolved = "/"
        pending.extend((candidate, None))
        pending.extend(reversed(target.split("/")))
    return resolved


def _subject(untrusted_path: str) -> str:
    # An absolute path is the caller's, but it is also a host path: it is never repeated.
    if untrusted_path.startswith("/"):
        return "The absolute path"
    return quote(untrusted_path, MAX_ECHO_CHARS)


def _refusal(code: MCPErrorCode, subject: str, phrase: str) -> ToolFailure:
    return ToolFailure(f"{subject} {phrase}", code=code, invalid_params=("relative_path",))


def _outside(subject: str) -> ToolFailure:
    return _refusal(MCPErrorCode.ACCESS_DENIED, subject, "resolves outside the sandbox")


def _os_failure(error: int | None, subject: str) -> ToolFailure:
    row = _OS_ERRORS.get(error) if error is not None else None
    if row is None:
        # The errno's name is enough for an operator; the path and the OS text stay here.
        logger.warning("sandbox_fs_read: unexpected OS error %s", errno.errorcode.get(error or 0))
        return ToolFailure(
            "The file could not be read because of a server-side file system error.",
            code=MCPErrorCode.INTERNAL_ERROR,
        )
    code, phrase = row
    return _refusal(code, subject, phrase)


def _ensure_regular(mode: int, subject: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        raise _os_failure(errno.ELOOP, subject)
    if stat.S_ISDIR(mode):
        raise _os_failure(errno.EISDIR, subject)
    raise _refusal(MCPErrorCode.ACCESS_DENIED, subject, _SPECIAL_FILE)


def _walk_errno(exc: OSError, dir_fd: int, name: str) -> int | None:
    # With O_DIRECTORY the kernel reports a symlink as ENOTDIR rather than ELOOP. A symlink
    # here means a loop stopped the resolution or the tree changed under the read, and a
    # directory means it changed back; the caller is told so, not that a component is a
    # plain file.
    if exc.errno != errno.ENOTDIR:
        return exc.errno
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return exc.errno
    return errno.ELOOP if stat.S_ISLNK(mode) or stat.S_ISDIR(mode) else exc.errno


def _open_beneath(root_fd: int, parts: tuple[str, ...], subject: str) -> int:
    """Open the regular file `parts` names beneath `root_fd`, never following a symlink.

    Args:
        root_fd: The sandbox root's descriptor; it is not closed.
        parts: Canonical path components relative to the root, at least one, none of them
            empty, `.` or `..`.
        subject: How problems refer to the caller's path.

    Returns:
        A read-only descriptor of the leaf, which the caller must close. The leaf was a
        regular file when checked; the caller checks the descriptor again with `fstat`.

    Raises:
        ToolFailure: A component is missing, not a directory, a symlink, not permitted, or
            the leaf is not a regular file.
    """
    *directories, leaf = parts
    dir_fd = root_fd
    try:
        for name in directories:
            try:
                next_fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                raise _os_failure(_walk_errno(exc, dir_fd, name), subject) from None
            if dir_fd != root_fd:
                os.close(dir_fd)
            dir_fd = next_fd
        try:
            # Checked before the open so that no FIFO (whose open wakes a waiting writer) and
            # no device (whose open can have effects) is ever opened.
            _ensure_regular(os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False).st_mode, subject)
            return os.open(leaf, _LEAF_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _os_failure(exc.errno, subject) from None
    finally:
        if dir_fd != root_fd:
            os.close(dir_fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _decode_prefix(data: bytes, max_bytes: int, encoding: str, subject: str) -> tuple[str, int]:
    """Strictly decode the first `max_bytes` of `data`.

    Returns:
        The text, and how many bytes it was decoded from. When `data` is longer than
        `max_bytes`, the bytes of a character that `max_bytes` cuts are held back by the
        incremental decoder, so they are neither in the text nor counted.

    Raises:
        ToolFailure: The bytes are not valid text in `encoding`.
    """
    truncated = len(data) > max_bytes
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    try:
        content = decoder.decode(data[:max_bytes], final=not truncated)
        # A strict codec can still yield a lone surrogate (UTF-7 spells one '+2AA-'): that
        # is not text, and the result could not be written as JSON.
        content.encode("utf-8")
    except UnicodeError:
        raise ToolFailure(
            f"{subject} holds bytes that are not valid {encoding} text",
            invalid_params=("encoding",),
        ) from None
    pending, _ = decoder.getstate()
    return content, min(len(data), max_bytes) - len(pending)


class _RootState(enum.Enum):
    OPEN = enum.auto()
    # Closed to new reads; the last read in flight releases the descriptor.
    CLOSING = enum.auto()
    CLOSED = enum.auto()


class SandboxRoot:
    """The sandbox directory, opened once at start-up and held by descriptor.

    The configured path is resolved once (it may be reached through symlinks) and its
    canonical directory is opened. Reads walk from that descriptor, so renaming or replacing
    the root's path later cannot redirect them to another directory.

    Args:
        root: The root as `open_root` opened it at start-up; its descriptor is owned from
            now on and closed by `close`.
    """

    def __init__(self, root: OpenedRoot) -> None:
        self._root: Final = root.path
        self._root_names: Final = _components(root.path)
        self._fd: Final = root.fd
        # Guards the state and the count of reads using the descriptor: closing it while a
        # worker thread still walks from it would let a reused descriptor number anchor
        # the walk somewhere else.
        self._lock: Final = threading.Lock()
        self._state = _RootState.OPEN
        self._readers = 0

    async def read(self, params: SandboxFSReadParams) -> SandboxFSReadResult:
        """Read one file in a worker thread; see `read_blocking`."""
        return await run_blocking(self.read_blocking, params)

    def read_blocking(self, params: SandboxFSReadParams) -> SandboxFSReadResult:
        """Read one file beneath the root, in the calling thread.

        Args:
            params: The validated arguments.

        Returns:
            The decoded text and what was read.

        Raises:
            ToolFailure: The path is outside the sandbox, missing, not a regular file or not
                permitted, the content is not valid text in the encoding, the sandbox is
                closed, or the file system failed (internal error, details withheld).
        """
        untrusted_path = params.relative_path
        subject = _subject(untrusted_path)
        parts = self._resolve_beneath(untrusted_path, subject)
        root_fd = self._start_read()
        try:
            fd = _open_beneath(root_fd, parts, subject)
        finally:
            self._finish_read()
        try:
            _ensure_regular(os.fstat(fd).st_mode, subject)
            data = _read_at_most(fd, params.max_bytes + 1)
        except OSError as exc:
            raise _os_failure(exc.errno, subject) from None
        finally:
            os.close(fd)
        content, bytes_read = _decode_prefix(data, params.max_bytes, params.encoding, subject)
        return SandboxFSReadResult(
            resolved_path="/".join(parts),
            content=content,
            bytes_read=bytes_read,
            truncated=len(data) > params.max_bytes,
        )

    def _resolve_beneath(self, untrusted_path: str, subject: str) -> tuple[str, ...]:
        """Step 1: resolve the path and return its canonical components below the root.

        Raises:
            ToolFailure: The path resolves outside the root, meets a loop, or cannot name a
                regular file.
        """
        relative = untrusted_path
        if untrusted_path.startswith("/"):
            names = _components(untrusted_path)
            if names[: len(self._root_names)] != self._root_names:
                raise _outside(subject)
            relative = "/".join(names[len(self._root_names) :]) or "."
        try:
            resolved = _realpath(self._root, relative)
        except OSError as exc:
            # Missing components are kept, as realpath keeps them; what escapes is ELOOP
            # (too many links) or comes from readlink after lstat found a symlink, so the
            # link changed in between. EINVAL means it is no longer a symlink at all.
            error = errno.ELOOP if exc.errno == errno.EINVAL else exc.errno
            raise _os_failure(error, subject) from None
        resolved_names = _components(resolved)
        if resolved_names[: len(self._root_names)] != self._root_names:
            raise _outside(subject)
        parts = tuple(resolved_names[len(self._root_names) :])
        if ".." in parts:
            # realpath returns a normalised path, even when a loop stops it early. The walk
            # relies on that (an openat of '..' would climb out of the root), so it is
            # checked here rather than assumed.
            raise _refusal(
                MCPErrorCode.ACCESS_DENIED, subject, "cannot be resolved to a canonical path"
            )
        if untrusted_path.rpartition("/")[2] in _NOT_A_FILE_NAME:
            raise _refusal(
                MCPErrorCode.VALIDATION_ERROR,
                subject,
                "does not name a file: it ends in '/', '.' or '..'",
            )
        if not parts:
            raise _os_failure(errno.EISDIR, subject)
        return parts

    def _start_read(self) -> int:
        # Borrow the root's descriptor for one walk; `_finish_read` gives it back.
        with self._lock:
            if self._state is not _RootState.OPEN:
                raise ToolFailure(
                    "The sandbox is closed because the server is shutting down.",
                    code=MCPErrorCode.INTERNAL_ERROR,
                )
            self._readers += 1
            return self._fd

    def _finish_read(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._state is _RootState.CLOSING and self._readers == 0:
                self._release()

    def close(self) -> None:
        """Refuse new reads, and release the descriptor once reads in flight finish.

        Calling it again does nothing.
        """
        with self._lock:
            if self._state is not _RootState.OPEN:
                return
            self._state = _RootState.CLOSING
            if self._readers == 0:
                self._release()

    async def aclose(self) -> None:
        """The registry's shutdown hook; see `close`."""
        self.close()

    def _release(self) -> None:
        # Called with the lock held, exactly once.
        self._state = _RootState.CLOSED
        os.close(self._fd)


def build_fs_tool(
    settings: Settings, opened: OpenedRoot | None = None
) -> ToolSpec[SandboxFSReadParams, SandboxFSReadResult]:
    """Describe `sandbox_fs_read` over the configured sandbox root.

    Args:
        settings: The validated configuration; `safe_data_dir` must be set.
        opened: The root opened at start-up; opened here when None.

    Returns:
        The tool, whose `close` hook releases the root's descriptor.

    Raises:
        ConfigError: `MCP_SAFE_DATA_DIR` is unset, or its directory cannot be opened.
    """
    if opened is None:
        if settings.safe_data_dir is None:
            raise ConfigError("MCP_SAFE_DATA_DIR", "an absolute path to an existing directory")
        opened = open_root(settings.safe_data_dir)
    root = SandboxRoot(opened)
    return ToolSpec(
        name="sandbox_fs_read",
        title="Sandboxed file read",
        description=DESCRIPTION,
        params_model=SandboxFSReadParams,
        result_model=SandboxFSReadResult,
        run=root.read,
        close=root.aclose,
    )
