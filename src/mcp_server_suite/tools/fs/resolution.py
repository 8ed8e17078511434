"""Resolution: from the caller's path to a descriptor of what it names beneath the root.

Rules:

1. Nothing outside the root is ever looked at. Every route that leaves it (a `..` above the
   root, an absolute path or symbolic link, a mount beneath it that is not crossed) fails
   with `EXDEV` at the step that would leave, whatever exists outside, so no answer tells
   anything about the outside. An absolute `relative_path` is accepted only when it names
   the canonical root by components, before anything is resolved; the rest of it is then
   resolved like a relative path.
2. The kernel resolves: `openat2` from the root's descriptor with `RESOLVE_BENEATH`,
   `RESOLVE_NO_MAGICLINKS` and, unless cross-mount reads are enabled, `RESOLVE_NO_XDEV`.
   Symbolic links are followed as the kernel always follows them: at most 40 per lookup, a
   trailing `/` after a file is `ENOTDIR`, and so on.
3. Where `openat2` is missing (`ENOSYS`) or refused (`EPERM`, a seccomp filter), for paths
   too long for one system call (`PATH_MAX`), and where `/proc` is not mounted (the walk
   keeps the leaf's directory, to reopen it by name), a walk in Python gives the same
   answers: one component at a time with `O_PATH | O_NOFOLLOW` from the directory before,
   `..` by going back to a directory it already holds (never by opening `..`), symbolic
   links read and followed here with the kernel's rules (the count of 40, `protected_symlinks`,
   `/proc` magic links refused), and mounts told apart by their IDs.
4. A lookup yields an `O_PATH` descriptor: resolving opens nothing for reading, so no FIFO
   or device is opened by it. `reopen` opens the same inode for I/O once its type is known.
5. Canonical names come with the descriptor. When the kernel followed no symbolic link they
   are the path's own names, with `..` applied; when it followed some, the walk resolves the
   path again for its names, and both must have reached the same inode.
"""

import errno
import logging
import os
import stat
from dataclasses import dataclass
from typing import Final

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.tools.fs import _openat2
from mcp_server_suite.tools.fs.mounts import filesystem_type, mount_id
from mcp_server_suite.tools.fs.root import SandboxRoot, open_root

__all__ = [
    "MAX_RESOLVED_CHARS",
    "MAX_SYMLINKS",
    "PATH_MAX",
    "Resolved",
    "Resolver",
    "configured_resolver",
    "relative_beneath",
]

logger = logging.getLogger("mcp_server_suite.tools.fs")

# Linux's PATH_MAX: the longest path one system call takes, its terminating NUL included.
# A longer path (4,096 characters of `d/` are 4,096 bytes) is resolved by the walk, one
# component at a time.
PATH_MAX: Final = 4096

# Linux's MAXSYMLINKS: the most symbolic links the kernel follows in one path lookup.
MAX_SYMLINKS: Final = 40

# Symbolic links can make a short path's canonical form far longer than PATH_MAX (40 links
# of up to 4,095 bytes each); the answer repeats the canonical path, so it is bounded. No
# real tree comes near 16,384 characters.
MAX_RESOLVED_CHARS: Final = 16 * 1024

# A lookup through `..` that a rename or mount raced fails with EAGAIN, and the kernel asks
# for a retry; three tries ride out a chance collision, and a caller who keeps renaming is
# told the path changed.
_RACE_RETRIES: Final = 3

_LOOKUP_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_KERNEL_FLAGS: Final = os.O_PATH | os.O_CLOEXEC

# A /proc symbolic link is a magic link (it jumps to an object rather than naming a path)
# exactly when its target is absolute or names an anonymous object ('pipe:[4026]'); the
# plain ones (self, thread-self, mounts, net) are relative paths.
_PROCFS: Final = "proc"
_ANONYMOUS_OBJECT: Final = ":["


def relative_beneath(untrusted_path: str, root_names: tuple[str, ...]) -> str:
    """The path relative to the root: as it is, or an absolute one with the root taken off.

    An absolute path must name the canonical root by its components, before anything is
    resolved (`/a//b/./c` names `/a/b/c`); what follows the root is kept as written, so a
    trailing `/` still means what it means.

    Raises:
        OSError: `EXDEV`, for an absolute path that does not start with the root.
    """
    if not untrusted_path.startswith("/"):
        return untrusted_path
    pieces = untrusted_path.split("/")
    matched = 0
    for index, piece in enumerate(pieces):
        if matched == len(root_names):
            return "/".join(pieces[index:]).lstrip("/") or "."
        if piece in ("", "."):
            continue
        if piece != root_names[matched]:
            break
        matched += 1
    if matched == len(root_names):
        return "."
    raise OSError(errno.EXDEV, "outside the root")


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a path names: an `O_PATH` descriptor of it, its canonical names and its status.

    Attributes:
        fd: The descriptor; `close` closes it.
        names: The canonical components beneath the root; empty for the root itself.
        status: `fstat` of the descriptor.
        parent: For a walk that was asked to keep it, the directory holding the leaf and the
            leaf's name, for reopening it by name where `/proc` is not mounted.
    """

    fd: int
    names: tuple[str, ...]
    status: os.stat_result
    parent: tuple[int, str] | None = None

    @property
    def path(self) -> str:
        """The canonical path relative to the root, `.` for the root."""
        return "/".join(self.names) or "."

    def close(self) -> None:
        """Close the descriptors."""
        os.close(self.fd)
        if self.parent is not None:
            os.close(self.parent[0])


def _lexical(relative: str) -> tuple[str, ...]:
    # The names of a path the kernel resolved without meeting a symbolic link: then every
    # `..` went to the lexical parent, and none above the root (that was EXDEV).
    names: list[str] = []
    for piece in relative.split("/"):
        if piece == "..":
            names[-1:] = []
        elif piece not in ("", "."):
            names.append(piece)
    return tuple(names)


def _same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _ensure_same_inode(a: os.stat_result, b: os.stat_result) -> None:
    if not _same_inode(a, b):
        raise OSError(errno.EAGAIN, "the name holds another inode")


class Resolver:
    """Resolves paths beneath one root, by the kernel's `openat2` or by the walk.

    Build it with `Resolver.probe`, which finds out what this kernel and process allow.

    Args:
        root: The sandbox root.
        cross_mounts: Whether mounts beneath the root are crossed (`MCP_FS_CROSS_MOUNTS`).
        kernel: Whether `openat2` resolves (else the walk does).
        cached: Whether `openat2` takes `RESOLVE_CACHED` (Linux 5.12).
        proc_reopen: Whether descriptors can be reopened through `/proc/self/fd`.
        root_status: `fstat` of the root.
        root_mount: The root's mount ID, None where `/proc` cannot tell.
        root_filesystem: The root's file system type, None where `/proc` cannot tell.
        protected_symlinks: Whether `fs.protected_symlinks` is on, which the walk mirrors.
    """

    def __init__(
        self,
        root: SandboxRoot,
        *,
        cross_mounts: bool,
        kernel: bool,
        cached: bool,
        proc_reopen: bool,
        root_status: os.stat_result,
        root_mount: int | None,
        root_filesystem: str | None,
        protected_symlinks: bool,
    ) -> None:
        self.root: Final = root
        self.cross_mounts: Final = cross_mounts
        self.kernel: Final = kernel
        self.cached: Final = cached
        self.proc_reopen: Final = proc_reopen
        self.root_filesystem: Final = root_filesystem
        self._root_status: Final = root_status
        self._root_mount: Final = root_mount
        self._protected_symlinks: Final = protected_symlinks
        self._resolve: Final = (
            _openat2.RESOLVE_BENEATH
            | _openat2.RESOLVE_NO_MAGICLINKS
            | (0 if cross_mounts else _openat2.RESOLVE_NO_XDEV)
        )

    @classmethod
    def probe(cls, root: SandboxRoot, *, cross_mounts: bool, use_kernel: bool = True) -> "Resolver":
        """Find out how this process can resolve paths beneath `root`, and say so in the log.

        Args:
            root: The sandbox root.
            cross_mounts: Whether mounts beneath the root are crossed.
            use_kernel: False to use the walk even where `openat2` works.

        Raises:
            SandboxClosed: The root is closed.
        """
        fd = root.acquire()
        try:
            kernel, cached = _probe_openat2(fd) if use_kernel else (False, False)
            status = os.fstat(fd)
            resolver = cls(
                root,
                cross_mounts=cross_mounts,
                kernel=kernel,
                cached=cached,
                proc_reopen=_probe_proc_reopen(fd, status),
                root_status=status,
                root_mount=mount_id(fd),
                root_filesystem=filesystem_type(fd),
                protected_symlinks=_protected_symlinks(),
            )
        finally:
            root.release()
        if not resolver.proc_reopen:
            logger.warning(
                "/proc/self/fd is not available: files are reopened by name for reading, and "
                "a file swapped for a FIFO or device at that moment can be opened (not read)"
            )
        return resolver

    def resolve(self, root_fd: int, relative: str) -> Resolved:
        """Resolve `relative` beneath the root's descriptor `root_fd`.

        Args:
            root_fd: The root's descriptor, borrowed by the caller for the lookup.
            relative: The path, relative to the root.

        Returns:
            What it names; the caller closes it.

        Raises:
            OSError: Why the path names nothing beneath the root (`EXDEV` for every route
                out of it; see the module's rules).
        """
        encoded = relative.encode("utf-8")
        if not self.kernel or not self.proc_reopen or len(encoded) >= PATH_MAX:
            return self._walk(root_fd, relative, keep_parent=not self.proc_reopen)
        for _ in range(_RACE_RETRIES):
            try:
                fd = _openat2.openat2(
                    root_fd, encoded, _KERNEL_FLAGS, self._resolve | _openat2.RESOLVE_NO_SYMLINKS
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return self._through_links(root_fd, relative, encoded)
                if exc.errno != errno.EAGAIN:
                    raise
                continue
            return self._described(fd, _lexical(relative))
        raise OSError(errno.EAGAIN, "the lookup kept racing renames")

    def resolve_cached(self, root_fd: int, relative: str) -> Resolved | None:
        """`resolve` from the kernel's caches alone, for the event loop; None if it would wait.

        It answers only what `resolve` would answer for the same path: a path that meets a
        symbolic link, or that the caches cannot resolve, gives None and goes to `resolve`
        in a worker thread.

        Raises:
            OSError: As `resolve`.
        """
        encoded = relative.encode("utf-8")
        if len(encoded) >= PATH_MAX:
            return None
        try:
            fd = _openat2.openat2(
                root_fd,
                encoded,
                _KERNEL_FLAGS,
                self._resolve | _openat2.RESOLVE_NO_SYMLINKS | _openat2.RESOLVE_CACHED,
            )
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ELOOP):
                return None
            raise
        return self._described(fd, _lexical(relative))

    def reopen(self, resolved: Resolved, flags: int) -> int:
        """Open the inode `resolved` names for I/O, and only that inode.

        Through `/proc/self/fd/N`, the kernel opens the very inode the `O_PATH` descriptor
        holds, so a name swapped meanwhile changes nothing. Where `/proc` is not mounted, the
        leaf is opened again by name from its parent, non-blocking and without following a
        link, and must turn out to be the same inode.

        Args:
            resolved: What was resolved, its type already checked.
            flags: The access flags (`O_RDONLY`, `O_DIRECTORY`...).

        Returns:
            The new descriptor, which the caller must close.

        Raises:
            OSError: The open failed (`EACCES`...), or `EAGAIN` when the name no longer
                holds the same inode.
        """
        flags |= os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        if resolved.parent is None:
            fd = os.open(f"/proc/self/fd/{resolved.fd}", flags)
        else:
            parent, name = resolved.parent
            fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=parent)
        try:
            _ensure_same_inode(os.fstat(fd), resolved.status)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def entry_status(self, dir_fd: int, name: str) -> os.stat_result:
        """The status of the entry `name` of a resolved directory, not following a link.

        Raises:
            OSError: `EXDEV` for a mount point that is not crossed; the lookup's error.
        """
        if self.kernel:
            fd = _openat2.openat2(
                dir_fd,
                name.encode("utf-8"),
                _LOOKUP_FLAGS,
                self._resolve | _openat2.RESOLVE_NO_SYMLINKS,
            )
        else:
            fd = os.open(name, _LOOKUP_FLAGS, dir_fd=dir_fd)
        try:
            status = os.fstat(fd)
            if not self.kernel:
                self._ensure_on_root_mount(fd, status)
            return status
        finally:
            os.close(fd)

    def _described(self, fd: int, names: tuple[str, ...]) -> Resolved:
        try:
            status = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return Resolved(fd, names, status)

    def _through_links(self, root_fd: int, relative: str, encoded: bytes) -> Resolved:
        # The kernel resolves, the walk names what it reached; both must reach one inode.
        for _ in range(_RACE_RETRIES):
            try:
                fd = _openat2.openat2(root_fd, encoded, _KERNEL_FLAGS, self._resolve)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
                continue
            break
        else:
            raise OSError(errno.EAGAIN, "the lookup kept racing renames")
        opened = self._described(fd, ())
        try:
            named = self._walk(root_fd, relative, keep_parent=False)
        except BaseException:
            opened.close()
            raise
        named.close()
        try:
            _ensure_same_inode(opened.status, named.status)
        except OSError:
            opened.close()
            raise
        return Resolved(opened.fd, named.names, opened.status)

    def _walk(self, root_fd: int, relative: str, *, keep_parent: bool) -> Resolved:
        """Resolve `relative` one component at a time, with the kernel's rules (rule 3)."""
        return _Walk(self, root_fd).run(relative, keep_parent=keep_parent)

    def _ensure_on_root_mount(self, fd: int, status: os.stat_result) -> None:
        if self.cross_mounts:
            return
        if self._root_mount is not None:
            # Mount IDs tell a bind mount of the same file system apart, and a btrfs
            # subvolume (another device number, the same mount) is not a mount to the kernel.
            if mount_id(fd) != self._root_mount:
                raise OSError(errno.EXDEV, "a mount point")
        elif status.st_dev != self._root_status.st_dev:
            raise OSError(errno.EXDEV, "another file system")

    def _link_target(self, fd: int, status: os.stat_result, here: int, followed: int) -> str:
        # The kernel's order: the count, then protected_symlinks, then magic links, then an
        # absolute target (which RESOLVE_BENEATH refuses).
        if followed > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links")
        if self._protected_symlinks and status.st_uid != os.geteuid():
            parent = os.fstat(here)
            sticky_world_writable = stat.S_ISVTX | stat.S_IWOTH
            if (parent.st_mode & sticky_world_writable) == sticky_world_writable and (
                parent.st_uid != status.st_uid
            ):
                raise OSError(errno.EACCES, "protected_symlinks")
        target = os.readlink("", dir_fd=fd)
        if (target.startswith("/") or _ANONYMOUS_OBJECT in target) and self._on_procfs(fd):
            raise OSError(errno.ELOOP, "a magic link")
        if target.startswith("/"):
            raise OSError(errno.EXDEV, "an absolute symbolic link")
        return target

    def _on_procfs(self, fd: int) -> bool:
        filesystem = filesystem_type(fd) if self.cross_mounts else self.root_filesystem
        return filesystem == _PROCFS


class _Walk:
    """One lookup by the walk: the directories it holds, and the links it has followed.

    `held` is the way down from the root, one open directory per component; `..` goes back
    up it, so the walk never opens `..` and never holds anything above the root.
    """

    def __init__(self, resolver: Resolver, root_fd: int) -> None:
        self._resolver = resolver
        self._root_fd = root_fd
        self._held: list[tuple[int, str]] = []
        self._followed = 0
        # The length of the canonical path so far, bounded by MAX_RESOLVED_CHARS.
        self._length = 0

    def run(self, relative: str, *, keep_parent: bool) -> Resolved:
        pending = relative.split("/")
        pending.reverse()
        try:
            while pending:
                piece = pending.pop()
                if piece == "":
                    continue
                if piece in (".", ".."):
                    self._dots(piece)
                    continue
                leaf = self._step(piece, pending)
                if leaf is not None:
                    fd, status = leaf
                    parent = (os.dup(self._here()), piece) if keep_parent else None
                    return Resolved(fd, (*self._names(), piece), status, parent)
            return self._directory(keep_parent=keep_parent)
        finally:
            for fd, _ in self._held:
                os.close(fd)

    def _here(self) -> int:
        return self._held[-1][0] if self._held else self._root_fd

    def _names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self._held)

    def _dots(self, piece: str) -> None:
        # The kernel checks search permission on a directory before every component it
        # resolves there, `.` and `..` included.
        os.close(os.open(".", _LOOKUP_FLAGS, dir_fd=self._here()))
        if piece == "..":
            if not self._held:
                raise OSError(errno.EXDEV, "above the root")
            fd, name = self._held.pop()
            self._length -= len(name) + 1
            os.close(fd)

    def _step(self, piece: str, pending: list[str]) -> tuple[int, os.stat_result] | None:
        """Take one name: hold a directory, follow a link, or return the leaf it names."""
        fd = os.open(piece, _LOOKUP_FLAGS, dir_fd=self._here())
        try:
            status = os.fstat(fd)
            self._resolver._ensure_on_root_mount(fd, status)
            if stat.S_ISLNK(status.st_mode):
                self._followed += 1
                target = self._resolver._link_target(fd, status, self._here(), self._followed)
                pending.extend(reversed(target.split("/")))
                return None
            self._length += len(piece) + 1
            if self._length > MAX_RESOLVED_CHARS + 1:
                raise OSError(errno.ENAMETOOLONG, "the canonical path is too long")
            if stat.S_ISDIR(status.st_mode):
                self._held.append((fd, piece))
                fd = -1
                return None
            if pending:
                raise OSError(errno.ENOTDIR, "not a directory")
            leaf, fd = (fd, status), -1
            return leaf
        finally:
            if fd >= 0:
                os.close(fd)

    def _directory(self, *, keep_parent: bool) -> Resolved:
        # The path ended on a directory: the last one held, or the root itself.
        names = self._names()
        if self._held:
            fd, name = self._held.pop()
            parent_fd = self._here()
        else:
            fd, name = os.open(".", _LOOKUP_FLAGS, dir_fd=self._root_fd), "."
            parent_fd = self._root_fd
        try:
            status = os.fstat(fd)
            parent = (os.dup(parent_fd), name) if keep_parent else None
        except BaseException:
            os.close(fd)
            raise
        return Resolved(fd, names, status, parent)


def _probe_openat2(fd: int) -> tuple[bool, bool]:
    resolve = _openat2.RESOLVE_BENEATH | _openat2.RESOLVE_NO_MAGICLINKS
    try:
        os.close(_openat2.openat2(fd, b".", _KERNEL_FLAGS, resolve))
    except OSError as exc:
        reason = {
            errno.ENOSYS: "the kernel has no openat2 (Linux 5.6 added it)",
            errno.EPERM: "a seccomp filter refuses openat2",
        }.get(exc.errno or 0, f"openat2 fails with {errno.errorcode.get(exc.errno or 0)}")
        logger.warning("%s: paths are resolved by the O_NOFOLLOW walk", reason)
        return False, False
    try:
        os.close(_openat2.openat2(fd, b".", _KERNEL_FLAGS, resolve | _openat2.RESOLVE_CACHED))
    except OSError:
        # EINVAL before Linux 5.12: no lookup can then be kept from waiting, so none runs
        # on the event loop.
        return True, False
    return True, True


def _probe_proc_reopen(fd: int, status: os.stat_result) -> bool:
    try:
        reopened = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _same_inode(os.fstat(reopened), status)
    finally:
        os.close(reopened)


def _protected_symlinks() -> bool:
    try:
        with open("/proc/sys/fs/protected_symlinks", "rb") as setting:
            return setting.read().strip() not in (b"", b"0")
    except OSError:
        # The kernel's own default is off; systemd turns it on, which /proc would show.
        return False


def configured_resolver(
    settings: Settings, root: SandboxRoot | None, *, use_kernel: bool
) -> tuple[SandboxRoot, Resolver]:
    """Return the sandbox root and the resolver beneath it that a file tool is built over.

    Args:
        settings: The validated configuration; `safe_data_dir` must be set.
        root: The root opened at start-up; opened here when None.
        use_kernel: False to resolve with the walk even where `openat2` works.

    Raises:
        ConfigError: `MCP_SAFE_DATA_DIR` is unset, or its directory cannot be opened.
    """
    if root is None:
        if settings.safe_data_dir is None:
            raise ConfigError("MCP_SAFE_DATA_DIR", "an absolute path to an existing directory")
        root = open_root(settings.safe_data_dir)
    resolver = Resolver.probe(root, cross_mounts=settings.fs_cross_mounts, use_kernel=use_kernel)
    return root, resolver
