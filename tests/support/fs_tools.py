"""Building the file tools over a fixture root, calling them, and calling them as nobody.

Every file test runs both resolvers: `kernel` (`openat2`, as the server uses wherever the
kernel has it) and `walk` (the `O_NOFOLLOW` walk the server falls back to on `ENOSYS` or a
seccomp `EPERM`), built with the tools' own switch; `tests/unit/test_fs_resolution.py` proves
that the server chooses the walk by itself when the kernel answers `ENOSYS`.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mcp_server_suite import __version__
from mcp_server_suite.config import Settings
from mcp_server_suite.core import methods
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.core.server import Send
from mcp_server_suite.core.versions import REVISIONS, ProtocolRevision
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import Problem
from mcp_server_suite.tools.fs.listing import DirectoryLister, build_list_tool
from mcp_server_suite.tools.fs.read import FileReader, build_read_tool
from mcp_server_suite.tools.fs.root import open_root

__all__ = [
    "MODES",
    "NOBODY",
    "FileTools",
    "as_nobody",
    "call",
    "complete",
    "file_tools",
    "reader_of",
    "response_bytes",
]

# The two resolvers every test runs.
MODES = ("kernel", "walk")

# The unprivileged uid and gid the permission and oracle cases run as.
NOBODY = 65534

T = TypeVar("T")


@dataclass(frozen=True)
class FileTools:
    """Both file tools over one root, as the server builds them."""

    read: ToolSpec[Any, Any]
    list: ToolSpec[Any, Any]

    @property
    def reader(self) -> FileReader:
        """The reader behind `read`, to call its steps directly."""
        return reader_of(self.read)

    @property
    def lister(self) -> DirectoryLister:
        """The lister behind `list`."""
        lister: DirectoryLister = self.list.run.__self__  # type: ignore[attr-defined]
        return lister


def reader_of(spec: ToolSpec[Any, Any]) -> FileReader:
    """The `FileReader` whose bound method is the tool's `run`."""
    reader: FileReader = spec.run.__self__  # type: ignore[attr-defined]  # A bound method.
    return reader


@contextmanager
def file_tools(root: Path, mode: str, *, cross_mounts: bool = False) -> Iterator[FileTools]:
    """Build `sandbox_fs_read` and `sandbox_fs_list` over `root`, sharing one descriptor."""
    settings = Settings(safe_data_dir=root, fs_cross_mounts=cross_mounts)
    opened = open_root(root, holders=2)
    use_kernel = mode == "kernel"
    tools = FileTools(
        build_read_tool(settings, opened, use_kernel=use_kernel),
        build_list_tool(settings, opened, use_kernel=use_kernel),
    )
    try:
        yield tools
    finally:
        opened.close()
        opened.close()


def complete(awaitable: Awaitable[T]) -> T:
    """Run an awaitable to completion on a fresh event loop."""

    async def wait() -> T:
        return await awaitable

    return asyncio.run(wait())


def call(spec: ToolSpec[Any, Any], arguments: Mapping[str, Any]) -> dict[str, Any] | Problem:
    """One call through the guardrails: the structured result, or the problem."""

    async def invoke() -> dict[str, Any] | Problem:
        try:
            output = await Guardrails(limiter=ConcurrencyLimiter()).invoke(spec, arguments)
        except ToolFailure as failure:
            return failure.problem
        return output.structured

    return asyncio.run(invoke())


def response_bytes(result: dict[str, Any], text: str) -> int:
    """The size of the `tools/call` response the server writes for this result.

    The request id is the longest the protocol guard accepts, of characters outside the BMP,
    each escaped as a surrogate pair, and the revision is the one whose envelope is largest
    (2026-07-28 adds `resultType` and the server's `_meta`): the largest envelope a read can
    get.
    """
    identity = methods.ServerIdentity(__version__)
    return max(
        len(encode(_reply(revision, identity, result, text).message))
        for revision in REVISIONS.values()
    )


def _reply(
    revision: ProtocolRevision, identity: methods.ServerIdentity, result: dict[str, Any], text: str
) -> Send:
    # The reply to a call with the longest request id, shaped as the dispatcher shapes it.
    body = methods.call_succeeded_result(result, text, revision)
    return methods.result("\U0001f600" * 256, methods.complete(body, revision, identity))


def _keep_dumpable() -> None:
    # A process that changes its uid is made undumpable, which turns its /proc entries over
    # to root; the server never changes uid, so the child puts that back as it would be.
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable = 4
    if libc.prctl(pr_set_dumpable, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")


def as_nobody(work: Callable[[], T]) -> T:
    """Run `work` in a forked child that dropped to uid and gid 65534; return its result.

    The result must be JSON data. Root bypasses file modes, so permission cases need an
    unprivileged process; after setuid to a non-zero uid the kernel clears every capability.
    """
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, whose coverage is not collected
        status = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            _keep_dumpable()
            os.write(writer, json.dumps(work()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError("the unprivileged child failed")
    result: T = json.loads(report)
    return result
