"""`sandbox_fs_list`: the entries of one directory beneath the root.

The directory is resolved like a file to read (`resolution.py`): the same containment, the
same answers for every route out. Its entries are reported by name, type, size and
modification time, sorted by name, and nothing in the answer comes from outside the root:

- a symbolic link is `symlink` when it resolves, by the same rules, to a file or directory
  inside the sandbox, and `other` otherwise; its target is never shown;
- a mount point the sandbox does not cross is `other` without a size or time, because what
  is mounted there lies outside, and what it covers cannot be seen;
- names that are not valid UTF-8 cannot be named by any caller (a path is Unicode text) and
  are left out, counted.

Listing runs in a worker thread: reading a directory can wait on its file system.
"""

import heapq
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import (
    EntryType,
    SandboxFSEntry,
    SandboxFSListParams,
    SandboxFSListResult,
)
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.fs._refusals import os_failure, refusal, subject_of
from mcp_server_suite.tools.fs.resolution import (
    Resolved,
    Resolver,
    configured_resolver,
    relative_beneath,
)
from mcp_server_suite.tools.fs.root import SandboxClosed, SandboxRoot
from mcp_server_suite.workers import run_blocking

__all__ = ["DESCRIPTION", "MAX_SCANNED_ENTRIES", "DirectoryLister", "build_list_tool"]

TOOL: Final = "sandbox_fs_list"

DESCRIPTION: Final = (
    "List one directory of the sandbox: each entry's name, type (file, directory, symlink "
    "that stays inside the sandbox, or other), size and modification time, sorted by name. "
    "relative_path is relative to the sandbox root and defaults to the root itself. At most "
    "max_entries entries are listed; truncated says there are more."
)

# A listing reads the directory through, to sort it; 100,000 entries take a fraction of a
# second, and a larger directory is listed from the first 100,000 its file system returns,
# so no listing holds a worker thread for long.
MAX_SCANNED_ENTRIES: Final = 100_000

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY


def _modified(status: os.stat_result) -> str:
    seconds, nanoseconds = divmod(status.st_mtime_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanoseconds // 1000)
    return moment.isoformat()


class _Scan:
    """One pass over a directory: the names that can be listed, and what was left out."""

    def __init__(self) -> None:
        self.unnamed = 0
        self.stopped_early = False

    def names(self, scanned: Iterator[os.DirEntry[str]]) -> Iterator[str]:
        """The valid UTF-8 names among the first MAX_SCANNED_ENTRIES entries."""
        for index, entry in enumerate(scanned):
            if index == MAX_SCANNED_ENTRIES:
                self.stopped_early = True
                return
            name = entry.name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                # os.scandir decodes with surrogateescape: a lone surrogate marks a byte
                # that is not UTF-8.
                self.unnamed += 1
                continue
            yield name


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
                permitted, the sandbox is closed, or the file system failed.
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
            raise os_failure(exc.errno, subject, TOOL) from None
        finally:
            self._root.release()

    def _listing(self, root_fd: int, directory: Resolved, limit: int) -> SandboxFSListResult:
        fd = self._resolver.reopen(directory, _DIRECTORY_FLAGS)
        scan = _Scan()
        try:
            with os.scandir(fd) as scanned:
                # The first names in order, without holding every name of a large directory.
                names = heapq.nsmallest(limit + 1, scan.names(scanned))
        finally:
            os.close(fd)
        entries = [self._entry(root_fd, directory, name) for name in names[:limit]]
        return SandboxFSListResult(
            resolved_path=directory.path,
            entries=entries,
            truncated=len(names) > limit or scan.stopped_early,
            unnamed_entries=scan.unnamed,
        )

    def _entry(self, root_fd: int, directory: Resolved, name: str) -> SandboxFSEntry:
        try:
            status = self._resolver.entry_status(directory.fd, name)
        except OSError:
            # A mount point not crossed (EXDEV: what is mounted lies outside), or an entry
            # gone since the scan: nothing is known about it.
            return SandboxFSEntry(name=name, type="other", size=None, modified=None)
        mode = status.st_mode
        kind: EntryType = "other"
        size: int | None = None
        if stat.S_ISREG(mode):
            kind, size = "file", status.st_size
        elif stat.S_ISDIR(mode):
            kind = "directory"
        elif stat.S_ISLNK(mode) and self._leads_inside(root_fd, directory, name):
            kind = "symlink"
        return SandboxFSEntry(name=name, type=kind, size=size, modified=_modified(status))

    def _leads_inside(self, root_fd: int, directory: Resolved, name: str) -> bool:
        try:
            target = self._resolver.resolve(root_fd, "/".join((*directory.names, name)))
        except OSError:
            return False
        try:
            mode = target.status.st_mode
            return stat.S_ISREG(mode) or stat.S_ISDIR(mode)
        finally:
            target.close()


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
