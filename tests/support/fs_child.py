"""The file tools in every resolver mode, as root or as nobody, behind one interface.

`served(root, mode, user=...)` yields a `Served` whose `read` and `list` take a tool's
arguments and give its structured result or its problem. The modes:

- `kernel`: `openat2`, as the server uses wherever the kernel has it;
- `walk`: the `O_NOFOLLOW` walk (the server's fallback on `ENOSYS` or a seccomp `EPERM`; the
  e2e tests force it with a real seccomp filter);
- `noproc`: a process with no `/proc` at all, as in a container that does not mount it: the
  tools run in a forked child that unshared its mount namespace, made it private and
  unmounted `/proc` there, then probed as the server does (so `openat2` is there, but every
  lookup is the walk, reopening by name);
- `noproc-walk`: the same, with `openat2` refused too: the case of issue 20's item 1.

In-process tools serve `kernel` and `walk` as root; everything else runs in a forked child
(as uid 65534 for `user="nobody"`, optionally with few descriptors to spare), which answers calls
over a pipe until the context ends. Unsharing needs root; CI runs as root.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import resource
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from tests.support.fs_tools import NOBODY, FileTools, call, file_tools

__all__ = ["ALL_MODES", "USERS", "Served", "served", "unmount_proc"]

ALL_MODES = ("kernel", "walk", "noproc", "noproc-walk")
USERS = ("root", "nobody")

Answer = dict[str, Any] | Problem

_CLONE_NEWNS = 0x20000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_PR_SET_DUMPABLE = 4


class Served(Protocol):
    """Both tools, wherever they run."""

    def read(self, arguments: Mapping[str, Any]) -> Answer:
        """One `sandbox_fs_read` call."""

    def list(self, arguments: Mapping[str, Any]) -> Answer:
        """One `sandbox_fs_list` call."""


class _InProcess:
    def __init__(self, tools: FileTools) -> None:
        self.tools = tools

    def read(self, arguments: Mapping[str, Any]) -> Answer:
        return call(self.tools.read, arguments)

    def list(self, arguments: Mapping[str, Any]) -> Answer:
        return call(self.tools.list, arguments)


class _Child:
    def __init__(self, requests: Any, answers: Any) -> None:
        self._requests = requests
        self._answers = answers

    def _ask(self, tool: str, arguments: Mapping[str, Any]) -> Answer:
        self._requests.write(json.dumps({"tool": tool, "arguments": dict(arguments)}) + "\n")
        self._requests.flush()
        line = self._answers.readline()
        if not line:
            raise AssertionError("the tools' child process died")
        answer = json.loads(line)
        if "problem" in answer:
            problem = answer["problem"]
            return Problem.of(
                MCPErrorCode(problem["code"]),
                problem["detail"],
                invalid_params=tuple(problem["invalid_params"]),
                metadata=problem["metadata"],
            )
        result: dict[str, Any] = answer["result"]
        return result

    def read(self, arguments: Mapping[str, Any]) -> Answer:
        return self._ask("read", arguments)

    def list(self, arguments: Mapping[str, Any]) -> Answer:
        return self._ask("list", arguments)


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), what)


def unmount_proc() -> None:
    """In this process only: a private mount namespace without `/proc` (needs root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Private first: an unmount in a namespace whose mounts are shared with the parent's
    # would propagate there and take the machine's /proc away.
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")
    _check(libc.umount2(b"/proc", _MNT_DETACH), "umount /proc")
    if os.path.exists("/proc/self"):
        raise AssertionError("/proc is still mounted")


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    # A process that changed its uid is undumpable, which gives its /proc entries to root;
    # the server never changes uid, so the child puts that back as it would be.
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


async def _invoke(spec: Any, arguments: Mapping[str, Any]) -> Answer:
    try:
        output = await Guardrails(limiter=ConcurrencyLimiter()).invoke(spec, arguments)
    except ToolFailure as failure:
        return failure.problem
    structured: dict[str, Any] = output.structured
    return structured


def _limit_leaving(spare: int) -> int:
    # RLIMIT_NOFILE bounds descriptor numbers: the limit under which exactly `spare` numbers
    # are free. Found without /proc, by asking each number whether it is open.
    limit, free = 0, 0
    while free < spare:
        try:
            os.fstat(limit)
        except OSError:
            free += 1
        limit += 1
    return limit


def _serve(
    root: Path, mode: str, *, user: str, cross_mounts: bool, spare: int | None, pipes: Any
) -> None:  # pragma: no cover - runs in the child, whose coverage is not collected
    requests, answers = pipes
    if mode.startswith("noproc"):
        unmount_proc()
    resolver = "walk" if mode in ("walk", "noproc-walk") else "kernel"
    # The tools are built first, as the server opens its root at start-up; the root's path
    # (under pytest's private temporary directory) need not be traversable by nobody.
    loop = asyncio.new_event_loop()
    with file_tools(root, resolver, cross_mounts=cross_mounts) as tools:
        if user == "nobody":
            _drop_to_nobody()
        if spare is not None:
            # Room for `spare` more descriptors than the process holds now, and no more.
            limit = _limit_leaving(spare)
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        answers.write("ready\n")
        answers.flush()
        for line in requests:
            request = json.loads(line)
            spec = tools.read if request["tool"] == "read" else tools.list
            # One event loop for the child's life, made before the descriptor limit: what
            # runs short is the tool, not the harness.
            answer = loop.run_until_complete(_invoke(spec, request["arguments"]))
            if isinstance(answer, Problem):
                answers.write(json.dumps({"problem": answer.as_dict()}) + "\n")
            else:
                answers.write(json.dumps({"result": answer}) + "\n")
            answers.flush()


@contextmanager
def served(
    root: Path,
    mode: str,
    *,
    user: str = "root",
    cross_mounts: bool = False,
    spare: int | None = None,
) -> Iterator[Served]:
    """Both file tools over `root` in `mode`, as `user`, until the context ends.

    Args:
        root: The sandbox root.
        mode: One of `ALL_MODES`.
        user: `root`, or `nobody` (uid and gid 65534).
        cross_mounts: `MCP_FS_CROSS_MOUNTS`.
        spare: If set, the child may open only this many descriptors beyond those it holds
            when it starts serving (`RLIMIT_NOFILE`).
    """
    if mode in ("kernel", "walk") and user == "root" and spare is None:
        with file_tools(root, mode, cross_mounts=cross_mounts) as tools:
            yield _InProcess(tools)
        return
    request_read, request_write = os.pipe()
    answer_read, answer_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(request_write)
            os.close(answer_read)
            with os.fdopen(request_read) as requests, os.fdopen(answer_write, "w") as answers:
                _serve(
                    root,
                    mode,
                    user=user,
                    cross_mounts=cross_mounts,
                    spare=spare,
                    pipes=(requests, answers),
                )
            status = 0
        finally:
            os._exit(status)
    os.close(request_read)
    os.close(answer_write)
    with os.fdopen(request_write, "w") as requests, os.fdopen(answer_read) as answers:
        try:
            if answers.readline() != "ready\n":
                raise AssertionError("the tools' child process failed to start")
            yield _Child(requests, answers)
        finally:
            requests.close()
            _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError("the tools' child process failed")
