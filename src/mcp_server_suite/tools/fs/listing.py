"""`sandbox_fs_list`: the entries of one directory beneath the root.

The directory is resolved like a file to read (`resolution.py`): the same containment, the
same answers for every route out. Its entries are reported by name, type, size and
modification time, and nothing in the answer comes from outside the root:

- a symbolic link is `symlink` when it resolves, by the same rules, to a file or directory
  inside the sandbox under names an argument can carry, and `other` otherwise; its target
  is never shown;
- a mount point the sandbox does not cross (and any pseudo file system) is `other` without a
  size or time, because what is mounted there lies outside, and what it covers cannot be
  seen;
- names that no argument can carry are left out, counted in `unnamed_entries`: bytes that
  are not UTF-8 (a path is Unicode text), characters the argument sanitizer refuses (control
  and format characters: bidi overrides, zero-width characters...), and names longer than
  `MAX_NAME_CHARS`. So every name listed can be read back, and none can reorder or hide text
  where a client shows the answer.

The work of one call is bounded whatever the directory holds: the scan stops after the first
`max_entries + 1` names the file system returns (so a listing is those entries, sorted by
name, not the smallest names of a large directory), links are resolved from the directory
rather than from the root, under one budget of opens for the call (`LINK_STEPS`), and the
entries stop before the answer would exceed the response bound. A listing cut short by
either says so with `truncated`. Values the wire cannot carry exactly (a size past 2**53 - 1,
a time outside the years 1 to 9999) are null.

Listing runs in a worker thread: reading a directory can wait on its file system.
"""

import errno
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Final

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.guardrails.sanitizer import ensure_clean_arguments
from mcp_server_suite.schemas.errors import PolicyViolation, ToolFailure
from mcp_server_suite.schemas.fs import (
    MAX_NAME_CHARS,
    MAX_OFFSET,
    EntryType,
    SandboxFSEntry,
    SandboxFSListParams,
    SandboxFSListResult,
)
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.fs._refusals import RESOURCE_ERRORS, os_failure, refusal, subject_of
from mcp_server_suite.tools.fs.read import MAX_RESPONSE_BYTES, MAX_WIRE_BYTES_PER_CHAR, wire_cost
from mcp_server_suite.tools.fs.resolution import (
    Resolved,
    Resolver,
    configured_resolver,
    relative_beneath,
)
from mcp_server_suite.tools.fs.root import SandboxClosed, SandboxRoot
from mcp_server_suite.tools.fs.walk import Budget, Walk, WorkExceeded
from mcp_server_suite.workers import run_blocking

__all__ = [
    "DESCRIPTION",
    "LINK_STEPS",
    "MAX_SCANNED_ENTRIES",
    "DirectoryLister",
    "build_list_tool",
]

TOOL: Final = "sandbox_fs_list"

DESCRIPTION: Final = (
    "List one directory of the sandbox: each entry's name, type (file, directory, symlink "
    "that stays inside the sandbox, or other), size and modification time. relative_path is "
    "relative to the sandbox root and defaults to the root itself. At most max_entries "
    "entries are listed: the first ones the file system returns (its own order, not by "
    "name), sorted by name; truncated says there are more. Names no argument could carry "
    "(not UTF-8, control or format characters) are left out and counted in unnamed_entries."
)

# A directory of names that are all left out is still read no further than 100,000 entries:
# a fraction of a second, so no listing holds a worker thread for long.
MAX_SCANNED_ENTRIES: Final = 100_000

# The opens one listing may spend resolving its symbolic links (and reaching the directory
# again to resolve them from): a few hundred milliseconds of the walk at the worst, some
# hundred times what 1,000 links of a real tree take. On main, a directory 8,000 levels deep
# took 0.2 s per link, resolved from the root.
LINK_STEPS: Final = 100_000

# What one entry costs on the wire besides its name, at most, over both copies: its keys,
# the longest type, a 16-digit size, a time with a sign and microseconds, and the escaping
# of every quote in the text copy.
_ENTRY_BYTES: Final = 512

# The envelope and a listing's own members, as for a read.
_ENVELOPE_BYTES: Final = 8 * 1024

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY

# The instants `datetime` can show: the first second of year 1 and the last of year 9999.
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_SECOND: Final = -62_135_596_800
_LAST_SECOND: Final = 253_402_300_799


def _modified(status: os.stat_result) -> str | None:
    # Any time a file system holds (`touch -d @-99999999999` is one command): outside what
    # ISO 8601 in years 1 to 9999 can say, the time is null, never an exception.
    seconds, nanoseconds = divmod(status.st_mtime_ns, 1_000_000_000)
    if not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    moment = _EPOCH + timedelta(seconds=seconds, microseconds=nanoseconds // 1000)
    return moment.isoformat()


def _size(status: os.stat_result) -> int | None:
    # A sparse file can claim 2**63 bytes; past I-JSON's exact range the size is null.
    return status.st_size if status.st_size <= MAX_OFFSET else None


def _ensure_nameable(name: str) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise ValueError("too long")
    # os.scandir decodes with surrogateescape: a lone surrogate marks a byte that is not
    # UTF-8, which strict encoding refuses.
    name.encode("utf-8")
    ensure_clean_arguments(name)


class _Scan:
    """One pass over the start of a directory: the names that can be listed, and the rest."""

    def __init__(self) -> None:
        self.unnamed = 0
        self.stopped_early = False

    def names(self, scanned: Iterator[os.DirEntry[str]], wanted: int) -> list[str]:
        """The first `wanted` names that can be listed, and one more if there is one."""
        found: list[str] = []
        for index, entry in enumerate(scanned):
            if index == MAX_SCANNED_ENTRIES:
                self.stopped_early = True
                break
            name = entry.name
            try:
                _ensure_nameable(name)
            except (ValueError, PolicyViolation):
                # UnicodeEncodeError is a ValueError.
                self.unnamed += 1
                continue
            found.append(name)
            if len(found) > wanted:
                break
        return found


class _Links:
    """Resolves a listing's symbolic links from the directory, under one budget."""

    def __init__(self, resolver: Resolver, root_fd: int, directory: Resolved) -> None:
        self._resolver = resolver
        self._root_fd = root_fd
        self._directory = directory
        self._budget = Budget(LINK_STEPS)
        self._base: Walk | None = None

    def close(self) -> None:
        if self._base is not None:
            self._base.close()

    def leads_inside(self, name: str) -> bool:
        """Whether the link `name` leads to a file or directory inside, by names we can show.

        Raises:
            OSError: A shortage of descriptors or memory, or `EAGAIN` when the directory is
                no longer where its names lead.
            WorkExceeded: The listing's budget ran out.
        """
        walk = self._start().fork()
        try:
            target = walk.run(name, keep_parent=False)
        except OSError as exc:
            if exc.errno in RESOURCE_ERRORS:
                raise
            return False
        finally:
            walk.close()
        target.close()
        return stat.S_ISREG(target.status.st_mode) or stat.S_ISDIR(target.status.st_mode)

    def _start(self) -> Walk:
        # Down to the directory once, by its canonical names; each link is then resolved
        # from there, sharing the descriptors this walk holds.
        if self._base is None:
            base = self._resolver.start_walk(self._root_fd, self._budget)
            status = self._directory.status
            try:
                base.enter(self._directory.names, (status.st_dev, status.st_ino))
            except OSError as exc:
                base.close()
                if exc.errno in RESOURCE_ERRORS:
                    raise
                # The directory listed is no longer where its names lead.
                raise OSError(errno.EAGAIN, "the directory changed") from None
            except BaseException:
                base.close()
                raise
            self._base = base
        return self._base


class DirectoryLister:
    """Lists directories beneath one root.

    Args:
        resolver: How paths are resolved beneath the root.
    """

    def __init__(self, resolver: Resolver) -> None:
        self._resolver: Final = resolver
        self._root: Final = resolver.root

    async def list(self, params: SandboxFSListParams) -> SandboxFSListResult:
        """List one directory in a worker thread; see `list_blocking`."""
        return await run_blocking(self.list_blocking, params)

    def list_blocking(self, params: SandboxFSListParams) -> SandboxFSListResult:
        """List one directory, in the calling thread.

        Raises:
            ToolFailure: The path is outside the sandbox, missing, not a directory or not
                permitted, the sandbox is closed, the server is short of descriptors or
                memory (retryable), or the file system failed.
        """
        subject = subject_of(params.relative_path)
        try:
            root_fd = self._root.acquire()
        except SandboxClosed:
            raise ToolFailure(
                "The sandbox is closed because the server is shutting down.",
                code=MCPErrorCode.INTERNAL_ERROR,
            ) from None
        try:
            relative = relative_beneath(params.relative_path, self._root.names)
            directory = self._resolver.resolve(root_fd, relative)
            try:
                if not stat.S_ISDIR(directory.status.st_mode):
                    raise refusal(
                        MCPErrorCode.VALIDATION_ERROR, subject, "names a file, not a directory"
                    )
                return self._listing(root_fd, directory, params.max_entries)
            finally:
                directory.close()
        except OSError as exc:
            raise os_failure(exc, subject, TOOL) from None
        finally:
            self._root.release()

    def _listing(self, root_fd: int, directory: Resolved, limit: int) -> SandboxFSListResult:
        fd = self._resolver.reopen(directory, _DIRECTORY_FLAGS)
        scan = _Scan()
        try:
            with os.scandir(fd) as scanned:
                names = scan.names(scanned, limit)
        finally:
            os.close(fd)
        truncated = len(names) > limit or scan.stopped_early
        budget = (
            MAX_RESPONSE_BYTES - _ENVELOPE_BYTES - len(directory.path) * MAX_WIRE_BYTES_PER_CHAR
        )
        entries: list[SandboxFSEntry] = []
        links = _Links(self._resolver, root_fd, directory)
        try:
            for name in sorted(names[:limit]):
                budget -= _ENTRY_BYTES + wire_cost(name)
                if budget < 0:
                    truncated = True
                    break
                entries.append(self._entry(directory, name, links))
        except WorkExceeded:
            truncated = True
        finally:
            links.close()
        return SandboxFSListResult(
            resolved_path=directory.path,
            entries=entries,
            truncated=truncated,
            unnamed_entries=scan.unnamed,
        )

    def _entry(self, directory: Resolved, name: str, links: _Links) -> SandboxFSEntry:
        try:
            status = self._resolver.entry_status(directory.fd, name)
        except OSError as exc:
            if exc.errno in RESOURCE_ERRORS:
                raise
            # A mount point not crossed (EXDEV: what is mounted lies outside), a pseudo file
            # system, or an entry gone since the scan: nothing is known about it.
            return SandboxFSEntry(name=name, type="other", size=None, modified=None)
        mode = status.st_mode
        kind: EntryType = "other"
        size: int | None = None
        if stat.S_ISREG(mode):
            kind, size = "file", _size(status)
        elif stat.S_ISDIR(mode):
            kind = "directory"
        elif stat.S_ISLNK(mode) and links.leads_inside(name):
            kind = "symlink"
        return SandboxFSEntry(name=name, type=kind, size=size, modified=_modified(status))


def build_list_tool(
    settings: Settings, root: SandboxRoot | None = None, *, use_kernel: bool = True
) -> ToolSpec[SandboxFSListParams, SandboxFSListResult]:
    """Describe `sandbox_fs_list` over the configured sandbox root.

    Args:
        settings: The validated configuration; `safe_data_dir` must be set.
        root: The root opened at start-up; opened here when None.
        use_kernel: False to resolve with the walk even where `openat2` works.

    Returns:
        The tool, whose `close` hook releases its hold on the root.

    Raises:
        ConfigError: `MCP_SAFE_DATA_DIR` is unset, or its directory cannot be opened.
    """
    root, resolver = configured_resolver(settings, root, use_kernel=use_kernel)
    lister = DirectoryLister(resolver)
    return ToolSpec(
        name=TOOL,
        title="Sandboxed directory listing",
        description=DESCRIPTION,
        params_model=SandboxFSListParams,
        result_model=SandboxFSListResult,
        run=lister.list,
        close=root.aclose,
    )
