"""Resolution: from the caller's path to a descriptor of what it names beneath the root.

Rules:

1. Nothing outside the root is ever looked at. Every route that leaves it (a `..` above the
   root, an absolute path or symbolic link, a mount beneath it that is not crossed) fails
   with `EXDEV` at the step that would leave, whatever exists outside, so no answer tells
   anything about the outside. An absolute `relative_path` is accepted only when it names
   the canonical root by components, before anything is resolved; the rest of it is then
   resolved like a relative path. Where this system gives no way to tell a mount point
   (`mounts.py`), a lookup the walk would have to check is refused, not guessed.
2. The kernel resolves: `openat2` from the root's descriptor with `RESOLVE_BENEATH`,
   `RESOLVE_NO_MAGICLINKS` and `RESOLVE_NO_XDEV`. Symbolic links are followed as the kernel
   always follows them: at most 40 per lookup, a trailing `/` after a file is `ENOTDIR`, and
   so on. Where cross-mount reads are enabled, a lookup the kernel refuses with `EXDEV` is
   resolved again by the walk, which crosses mounts one at a time and refuses the kernel's
   pseudo file systems (procfs, sysfs...): the kernel cannot be asked to cross some mounts
   and not others, and the walk gives every resolver the same answer.
3. Where `openat2` is missing (`ENOSYS`) or refused (`EPERM`, a seccomp filter), for paths
   too long for one system call (`PATH_MAX`), and where `/proc` is not mounted (the walk
   keeps the leaf's directory, to reopen it by name), the walk (`walk.py`) gives the same
   answers, holding a bounded number of descriptors however deep the path.
4. A lookup yields an `O_PATH` descriptor: resolving opens nothing for reading, so no FIFO
   or device is opened by it. `reopen` opens the same inode for I/O once its type is known.
5. Canonical names come with the descriptor. When the kernel followed no symbolic link they
   are the path's own names, with `..` applied; when it followed some, the walk resolves the
   path again for its names, and both must have reached the same inode. A name reached
   through a link that no argument could carry is refused (`Unnameable`).
6. A shortage of descriptors or memory is raised as the kernel's errno (`EMFILE`...) from
   wherever it happens, never turned into an answer about the path.
"""

import errno
import logging
import os
import stat
from typing import Final

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.tools.fs import _openat2
from mcp_server_suite.tools.fs._refusals import MountsUnknown, PseudoFilesystem
from mcp_server_suite.tools.fs.mounts import (
    PSEUDO_FILESYSTEMS,
    MountIDs,
    filesystem_type,
    mount_id,
    probe_mount_ids,
)
from mcp_server_suite.tools.fs.root import SandboxRoot, open_root
from mcp_server_suite.tools.fs.walk import (
    MAX_RESOLVED_CHARS,
    MAX_SYMLINKS,
    Budget,
    Resolved,
    Walk,
)

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

# A lookup through `..` that a rename or mount raced fails with EAGAIN, and the kernel asks
# for a retry; three tries ride out a chance collision, and a caller who keeps renaming is
# told the path changed.
_RACE_RETRIES: Final = 3

_LOOKUP_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_KERNEL_FLAGS: Final = os.O_PATH | os.O_CLOEXEC


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
        mounts: Where mount IDs come from and the root's mount ID, None where nothing tells.
        root_filesystem: The root's file system type (`mounts.filesystem_type`).
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
        mounts: tuple[MountIDs, int] | None,
        root_filesystem: str,
        protected_symlinks: bool,
    ) -> None:
        self.root: Final = root
        self.cross_mounts: Final = cross_mounts
        self.kernel: Final = kernel
        self.cached: Final = cached
        self.proc_reopen: Final = proc_reopen
        self.root_filesystem: Final = root_filesystem
        self.mounts: Final = mounts
        self._root_status: Final = root_status
        self._root_identity: Final = (root_status.st_dev, root_status.st_ino)
        self._protected_symlinks: Final = protected_symlinks
        self._resolve: Final = (
            _openat2.RESOLVE_BENEATH | _openat2.RESOLVE_NO_MAGICLINKS | _openat2.RESOLVE_NO_XDEV
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
            ConfigError: The root is on a kernel pseudo file system (procfs, sysfs...).
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
                mounts=probe_mount_ids(fd),
                root_filesystem=filesystem_type(fd),
                protected_symlinks=_protected_symlinks(),
            )
        finally:
            root.release()
        if resolver.root_filesystem in PSEUDO_FILESYSTEMS:
            raise ConfigError(
                "MCP_SAFE_DATA_DIR",
                "a directory on a file system that holds data, not on a kernel pseudo file "
                "system (procfs, sysfs...)",
                root.path,
            )
        if not resolver.proc_reopen:
            logger.warning(
                "/proc/self/fd is not available: files are reopened by name for reading, and "
                "a file swapped for a FIFO or device at that moment can be opened (not read)"
            )
        if resolver.mounts is None and not cross_mounts:
            logger.error(
                "no statx mount IDs, file handles or /proc: mount points beneath the root "
                "cannot be told apart, so every lookup the walk makes is refused; mount /proc, "
                "or set MCP_FS_CROSS_MOUNTS=true to read across mounts"
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
            return self.walk(root_fd, relative, keep_parent=not self.proc_reopen)
        for _ in range(_RACE_RETRIES):
            try:
                fd = _openat2.openat2(
                    root_fd, encoded, _KERNEL_FLAGS, self._resolve | _openat2.RESOLVE_NO_SYMLINKS
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return self._through_links(root_fd, relative, encoded)
                if exc.errno == errno.EXDEV and self.cross_mounts:
                    return self.walk(root_fd, relative, keep_parent=False)
                if exc.errno != errno.EAGAIN:
                    raise
                continue
            return self._described(fd, _lexical(relative))
        raise OSError(errno.EAGAIN, "the lookup kept racing renames")

    def resolve_cached(self, root_fd: int, relative: str) -> Resolved | None:
        """`resolve` from the kernel's caches alone, for the event loop; None if it would wait.

        It answers only what `resolve` would answer for the same path: a path that meets a
        symbolic link, or that the caches cannot resolve, gives None and goes to `resolve`
        in a worker thread. It is not used where mounts are crossed.

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
            OSError: `EXDEV` for a mount point that is not crossed, `PseudoFilesystem` for a
                pseudo file system, the lookup's error.
        """
        fd = os.open(name, _LOOKUP_FLAGS, dir_fd=dir_fd)
        try:
            status = os.fstat(fd)
            self.ensure_allowed(fd, status)
            return status
        finally:
            os.close(fd)

    def walk(
        self, root_fd: int, relative: str, *, keep_parent: bool, budget: Budget | None = None
    ) -> Resolved:
        """Resolve `relative` one component at a time, with the kernel's rules (rule 3).

        Raises:
            OSError: As `resolve`.
            WorkExceeded: `budget` ran out.
        """
        walk = self.start_walk(root_fd, budget)
        try:
            return walk.run(relative, keep_parent=keep_parent)
        finally:
            walk.close()

    def start_walk(self, root_fd: int, budget: Budget | None = None) -> Walk:
        """A walk at the root, for a caller that resolves several paths from one place.

        Args:
            root_fd: The root's descriptor, borrowed for as long as the walk is open.
            budget: The bound on the walk's opens, shared with its forks.
        """
        return Walk(self, root_fd, self._root_identity, budget)

    def ensure_allowed(self, fd: int, status: os.stat_result) -> None:
        """Refuse what a lookup opened when it lies on a mount it may not enter.

        Raises:
            OSError: `EXDEV` for a mount that is not crossed.
            PseudoFilesystem: A kernel pseudo file system, even where mounts are crossed.
            MountsUnknown: Whether it is a mount point cannot be told here.
        """
        if self.cross_mounts:
            # Everything on the root's device is on the root's file system, which is not a
            # pseudo one (`probe`); anything else is asked what it is.
            if status.st_dev != self._root_status.st_dev and (
                filesystem_type(fd) in PSEUDO_FILESYSTEMS
            ):
                raise PseudoFilesystem
            return
        if self.mounts is None:
            if status.st_dev != self._root_status.st_dev:
                raise OSError(errno.EXDEV, "another file system")
            raise MountsUnknown
        source, root_mount = self.mounts
        # Mount IDs tell a bind mount of the same file system apart, and a btrfs subvolume
        # (another device number, the same mount) is not a mount to the kernel.
        found = mount_id(fd, source)
        if found is None:
            raise MountsUnknown
        if found != root_mount:
            raise OSError(errno.EXDEV, "a mount point")

    def link_target(self, fd: int, status: os.stat_result, here: int, followed: int) -> str:
        """The target of the symbolic link `fd` in directory `here`, if the kernel follows it.

        The kernel's order: the count, then `protected_symlinks`, then an absolute target
        (which `RESOLVE_BENEATH` refuses).

        Raises:
            OSError: `ELOOP` past `MAX_SYMLINKS`, `EACCES` for `protected_symlinks`, `EXDEV`
                for an absolute target.
        """
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
        if target.startswith("/"):
            raise OSError(errno.EXDEV, "an absolute symbolic link")
        return target

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
                if exc.errno == errno.EXDEV and self.cross_mounts:
                    return self.walk(root_fd, relative, keep_parent=False)
                if exc.errno != errno.EAGAIN:
                    raise
                continue
            break
        else:
            raise OSError(errno.EAGAIN, "the lookup kept racing renames")
        opened = self._described(fd, ())
        try:
            named = self.walk(root_fd, relative, keep_parent=False)
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
