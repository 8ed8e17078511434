"""The walk: path resolution in Python, one component at a time, with the kernel's rules.

It stands in for `openat2` where that is missing or refused, names what the kernel reached
through symbolic links, resolves paths too long for one system call, and serves every lookup
where `/proc` is not mounted (see `resolution.py`, rule 3).

Rules:

1. Each name is opened `O_PATH | O_NOFOLLOW` from the directory before it, and what it opens is
   checked (`Resolver.ensure_allowed`: the mount, the kind of file system) before it is used.
2. `..` never opens `..`: it goes back to the level the walk came down from, so nothing above
   the root is ever held, and `..` above the root is `EXDEV`.
3. The walk remembers every level it went down (name and inode) but holds a descriptor for
   only a few: every level within `WINDOW` of where it is, every `WINDOW`-th level within
   `WINDOW**2`, every `WINDOW**2`-th within `WINDOW**3`, and so on, which is at most `WINDOW`
   per tier: 40 at the deepest canonical path `MAX_RESOLVED_CHARS` allows, where one per level
   ran a process out of descriptors at 1,400 levels. A level it no longer holds is reached
   again from the nearest one it holds, downward, by the names it remembers, and must turn out
   to be the same inode (else `EAGAIN`: the tree changed under the lookup).
4. Symbolic links are read and followed here with the kernel's rules: at most `MAX_SYMLINKS`
   per lookup, `protected_symlinks`, absolute targets refused (`EXDEV`).
5. Every open is one step of an optional `Budget`, so a caller that resolves many paths in
   one call (a listing) bounds its work.
"""

import errno
import operator
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from mcp_server_suite.guardrails.sanitizer import ensure_clean_arguments
from mcp_server_suite.schemas.errors import PolicyViolation
from mcp_server_suite.tools.fs._refusals import Unnameable

if TYPE_CHECKING:
    from mcp_server_suite.tools.fs.resolution import Resolver

__all__ = [
    "MAX_RESOLVED_CHARS",
    "MAX_SYMLINKS",
    "WINDOW",
    "Budget",
    "Resolved",
    "Walk",
    "WorkExceeded",
]

# Linux's MAXSYMLINKS: the most symbolic links the kernel follows in one path lookup.
MAX_SYMLINKS: Final = 40

# Symbolic links can make a short path's canonical form far longer than PATH_MAX (40 links
# of up to 4,095 bytes each); the answer repeats the canonical path, so it is bounded. No
# real tree comes near 16,384 characters.
MAX_RESOLVED_CHARS: Final = 16 * 1024

# Levels held per tier (rule 3). Eight keeps a walk at 40 descriptors or fewer at the 8,192
# levels MAX_RESOLVED_CHARS allows, and reaching a level again costs at most eight steps
# from the tier below, each step one open.
WINDOW: Final = 8

_LOOKUP_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_FLAGS: Final = _LOOKUP_FLAGS | os.O_DIRECTORY


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


class WorkExceeded(Exception):
    """A `Budget` ran out: the caller stops what it was doing."""


class Budget:
    """A bound on the opens one call may make across all its lookups.

    Args:
        steps: How many opens are allowed.
    """

    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> None:
        """Take one step.

        Raises:
            WorkExceeded: No step was left.
        """
        if self.left <= 0:
            raise WorkExceeded
        self.left -= 1


def _kept(level: int, top: int) -> bool:
    # Rule 3: within WINDOW of the top every level is held; within WINDOW**(j+1), every
    # WINDOW**j-th.
    distance, span, stride = top - level, WINDOW, 1
    while distance >= span:
        span *= WINDOW
        stride *= WINDOW
    return level % stride == 0


class _Level(NamedTuple):
    # Immutable, so that forks share the levels of the walk they start from without copying
    # them: a change is a new level in the changer's own list. `owner` is the walk that
    # closes `fd`; `foreign` marks a name that came from a link's target, not the caller.
    name: str
    identity: tuple[int, int] | None
    fd: int | None
    owner: "Walk | None"
    foreign: bool = False


_NAME: Final = operator.itemgetter(0)


def _ensure_identity(level: _Level, status: os.stat_result) -> tuple[int, int]:
    identity = (status.st_dev, status.st_ino)
    if level.identity is not None and identity != level.identity:
        raise OSError(errno.EAGAIN, "a directory on the way changed")
    return identity


def _ensure_nameable(name: str) -> None:
    # A name reached through a link comes from the file system, not from an argument: one
    # that no argument could carry (bytes that are not UTF-8, a character the sanitizer
    # refuses) is never put in an answer.
    try:
        name.encode("utf-8")
        ensure_clean_arguments(name)
    except (UnicodeEncodeError, PolicyViolation):
        raise Unnameable from None


class Walk:
    """One walk: the levels it went down, the descriptors it holds, the links it followed.

    Args:
        resolver: The resolver whose rules it keeps.
        root_fd: The root's descriptor, borrowed for the walk.
        root_identity: The root's device and inode.
        budget: The bound on its opens, if any.

    Close it with `close` when done, whatever happened.
    """

    def __init__(
        self,
        resolver: "Resolver",
        root_fd: int,
        root_identity: tuple[int, int],
        budget: Budget | None = None,
    ) -> None:
        self._resolver = resolver
        self._levels = [_Level("", root_identity, root_fd, None)]
        self._budget = budget
        # The levels whose names came from links' targets, still on the way down.
        self._foreign: list[int] = []
        self._followed = 0
        # The length of the canonical path so far, bounded by MAX_RESOLVED_CHARS.
        self._length = 0

    def fork(self) -> "Walk":
        """A new walk that starts where this one is, borrowing the descriptors it holds.

        Close the fork before this walk.
        """
        other = Walk(self._resolver, -1, (0, 0), self._budget)
        other._levels = list(self._levels)
        other._foreign = list(self._foreign)
        other._length = self._length
        return other

    def close(self) -> None:
        """Close every descriptor the walk owns."""
        for index, level in enumerate(self._levels):
            if level.owner is self and level.fd is not None:
                os.close(level.fd)
                self._levels[index] = level._replace(fd=None, owner=None)

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical names of the level the walk is at."""
        return tuple(map(_NAME, self._levels))[1:]

    def enter(self, names: tuple[str, ...], identity: tuple[int, int]) -> None:
        """Go down through directories by their canonical names, following no link.

        Args:
            names: The canonical names of a directory beneath the root.
            identity: Its device and inode, which the walk must reach.

        Raises:
            OSError: A name is no longer a directory on an allowed mount, or `EAGAIN` when
                the names now lead to another directory.
            WorkExceeded: The budget ran out.
        """
        for name in names:
            self._spend()
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=self._top_fd())
            try:
                status = os.fstat(fd)
                self._resolver.ensure_allowed(fd, status)
            except BaseException:
                os.close(fd)
                raise
            self._length += len(name) + 1
            self._push(name, fd, status, foreign=False)
        _ensure_identity(_Level("", identity, None, None), os.fstat(self._top_fd()))

    def run(self, relative: str, *, keep_parent: bool) -> Resolved:
        """Resolve `relative` from where the walk is.

        Args:
            relative: The path.
            keep_parent: Also return a descriptor of the directory holding what it names.

        Raises:
            OSError: Why the path names nothing allowed (see the module's rules).
            WorkExceeded: The budget ran out.
        """
        pending = relative.split("/")
        pending.reverse()
        # The caller's own pieces are the bottom `given` of the stack; links' targets are
        # pushed above them.
        given = len(pending)
        while pending:
            piece = pending.pop()
            foreign = len(pending) >= given
            if not foreign:
                given -= 1
            if piece == "":
                continue
            if piece in (".", ".."):
                # The kernel checks search permission on a directory before every component
                # it resolves there, `.` and `..` included.
                os.close(os.open(".", _LOOKUP_FLAGS, dir_fd=self._top_fd()))
                if piece == "..":
                    self._up()
                continue
            leaf = self._step(piece, pending, foreign=foreign)
            if leaf is not None:
                return self._leaf(piece, *leaf, foreign=foreign, keep_parent=keep_parent)
        return self._directory(keep_parent=keep_parent)

    def _ensure_nameable(self) -> None:
        for index in self._foreign:
            _ensure_nameable(self._levels[index].name)

    def _spend(self) -> None:
        if self._budget is not None:
            self._budget.spend()

    def _top_fd(self) -> int:
        # The level the walk is at is always held (`_up` reaches it again if need be).
        fd = self._levels[-1].fd
        if fd is None:  # pragma: no cover - an invariant of `_push` and `_up`
            raise RuntimeError("the walk lost its place")
        return fd

    def _step(
        self, piece: str, pending: list[str], *, foreign: bool
    ) -> tuple[int, os.stat_result] | None:
        """Take one name: go down into a directory, follow a link, or return the leaf."""
        here = self._top_fd()
        self._spend()
        fd = os.open(piece, _LOOKUP_FLAGS, dir_fd=here)
        try:
            status = os.fstat(fd)
            self._resolver.ensure_allowed(fd, status)
            if stat.S_ISLNK(status.st_mode):
                self._followed += 1
                target = self._resolver.link_target(fd, status, here, self._followed)
                pending.extend(reversed(target.split("/")))
                return None
            self._length += len(piece) + 1
            if self._length > MAX_RESOLVED_CHARS + 1:
                raise OSError(errno.ENAMETOOLONG, "the canonical path is too long")
            if stat.S_ISDIR(status.st_mode):
                self._push(piece, fd, status, foreign=foreign)
                fd = -1
                return None
            if pending:
                raise OSError(errno.ENOTDIR, "not a directory")
            leaf, fd = (fd, status), -1
            return leaf
        finally:
            if fd >= 0:
                os.close(fd)

    def _push(self, name: str, fd: int, status: os.stat_result, *, foreign: bool) -> None:
        if foreign:
            self._foreign.append(len(self._levels))
        self._levels.append(_Level(name, (status.st_dev, status.st_ino), fd, self, foreign))
        # One level deeper: the levels now exactly WINDOW**j below the top move to a sparser
        # tier, and only those can stop being kept.
        top = len(self._levels) - 1
        span = WINDOW
        while span <= top:
            level = self._levels[top - span]
            if level.owner is self and level.fd is not None and not _kept(top - span, top):
                os.close(level.fd)
                self._levels[top - span] = level._replace(fd=None, owner=None)
            span *= WINDOW

    def _up(self) -> None:
        if len(self._levels) == 1:
            raise OSError(errno.EXDEV, "above the root")
        level = self._levels.pop()
        if level.foreign:
            self._foreign.pop()
        self._length -= len(level.name) + 1
        if level.owner is self and level.fd is not None:
            os.close(level.fd)
        self._hold(len(self._levels) - 1)

    def _hold(self, target: int) -> int:
        """The descriptor of level `target`, reached again if the walk no longer holds it."""
        fd = self._levels[target].fd
        if fd is not None:
            return fd
        top = len(self._levels) - 1
        anchor = target - 1
        while self._levels[anchor].fd is None:
            anchor -= 1
        current = self._levels[anchor].fd
        temporary = -1
        try:
            for index in range(anchor + 1, target + 1):
                level = self._levels[index]
                self._spend()
                opened, identity = self._reach(current, level)  # type: ignore[arg-type]  # Held.
                if temporary >= 0:
                    os.close(temporary)
                    temporary = -1
                if index == target or _kept(index, top):
                    self._levels[index] = level._replace(fd=opened, owner=self, identity=identity)
                else:
                    temporary = opened
                current = opened
        finally:
            if temporary >= 0:
                os.close(temporary)
        return current  # type: ignore[return-value]  # The target's descriptor, just held.

    def _reach(self, directory: int, level: _Level) -> tuple[int, tuple[int, int]]:
        # Rule 3: downward by the remembered name, to the remembered inode.
        try:
            fd = os.open(level.name, _DIRECTORY_FLAGS, dir_fd=directory)
        except (FileNotFoundError, NotADirectoryError):
            raise OSError(errno.EAGAIN, "a directory on the way changed") from None
        try:
            status = os.fstat(fd)
            identity = _ensure_identity(level, status)
            self._resolver.ensure_allowed(fd, status)
        except BaseException:
            os.close(fd)
            raise
        return fd, identity

    def _leaf(
        self, name: str, fd: int, status: os.stat_result, *, foreign: bool, keep_parent: bool
    ) -> Resolved:
        try:
            self._ensure_nameable()
            if foreign:
                _ensure_nameable(name)
            names = (*self.names, name)
            parent = (os.dup(self._top_fd()), name) if keep_parent else None
        except BaseException:
            os.close(fd)
            raise
        return Resolved(fd, names, status, parent)

    def _directory(self, *, keep_parent: bool) -> Resolved:
        # The path ended on a directory: the level the walk is at, the root included.
        self._ensure_nameable()
        names = self.names
        parent: tuple[int, str] | None = None
        if keep_parent:
            if len(self._levels) == 1:
                parent = (os.dup(self._top_fd()), ".")
            else:
                parent = (os.dup(self._hold(len(self._levels) - 2)), self._levels[-1].name)
        try:
            fd = os.open(".", _LOOKUP_FLAGS, dir_fd=self._top_fd())
            try:
                status = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            if parent is not None:
                os.close(parent[0])
            raise
        return Resolved(fd, names, status, parent)
