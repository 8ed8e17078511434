"""How each way a lookup or a read can fail is told to the caller.

A problem quotes at most `MAX_ECHO_CHARS` characters of the caller's own path, escaped, and
never an absolute path, the root, or the text of an OS error. Errors the caller can fix by
asking for another path are validation errors; refusals of what exists are access denials;
a shortage of descriptors or memory is said to be one, and retryable (never a verdict about
the path); any errno not in the table is a server-side fault, reported generically.
"""

import errno
import logging
from collections.abc import Mapping
from typing import Final

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode

__all__ = [
    "CHANGED",
    "MAX_ECHO_CHARS",
    "OUTSIDE",
    "RESOURCE_ERRORS",
    "SPECIAL_FILE",
    "MountsUnknown",
    "PseudoFilesystem",
    "Unnameable",
    "os_failure",
    "refusal",
    "subject_of",
]

logger = logging.getLogger("mcp_server_suite.tools.fs")

# The design document's bound on how much of the caller's path a problem may quote.
MAX_ECHO_CHARS: Final = 256

OUTSIDE: Final = "resolves outside the sandbox"
SPECIAL_FILE: Final = "is not a regular file (it is a FIFO, socket or device) and is not opened"
CHANGED: Final = "changed while it was being read; try again"
_PERMISSION: Final = "cannot be read: permission denied"

# The errors that say the server is short of something (descriptors, memory), whatever the
# path: each is answered as such, retryable, and never read as a fact about the path.
RESOURCE_ERRORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_SHORTAGE: Final = (
    "The server is short of open files or memory right now, so the call could not be "
    "completed; retry it shortly."
)


class PseudoFilesystem(OSError):
    """The path leads onto a kernel pseudo file system (procfs, sysfs...), never read."""

    def __init__(self) -> None:
        super().__init__(errno.EXDEV, "a pseudo file system")


class MountsUnknown(OSError):
    """Whether the path crosses a mount cannot be told on this system: refused, not guessed."""

    def __init__(self) -> None:
        super().__init__(errno.EXDEV, "mount points cannot be told apart")


class Unnameable(OSError):
    """The path resolves to a name no argument can carry (not UTF-8, or a refused character)."""

    def __init__(self) -> None:
        super().__init__(errno.EILSEQ, "a name no argument can carry")


# The refusals the resolution makes itself, beyond the kernel's errnos.
_OWN_REFUSALS: Final[Mapping[type[OSError], tuple[MCPErrorCode, str]]] = {
    PseudoFilesystem: (
        MCPErrorCode.ACCESS_DENIED,
        "leads onto a kernel pseudo file system (procfs, sysfs, debugfs...), which the "
        "sandbox never reads, even where mounts are crossed",
    ),
    MountsUnknown: (
        MCPErrorCode.ACCESS_DENIED,
        "cannot be confined here: this system gives the server no way to tell a mount point "
        "(no statx mount IDs, no file handles, no /proc), so nothing beneath the root is "
        "opened unless MCP_FS_CROSS_MOUNTS is true",
    ),
    Unnameable: (
        MCPErrorCode.ACCESS_DENIED,
        "resolves to a name that no argument can carry (not valid UTF-8, or holding a "
        "control or format character), which the sandbox never shows",
    ),
}

# Each errno a lookup or a read can meet, and what the caller is told. EXDEV is every route
# that leaves the root: a `..` above it, an absolute path or symbolic link, a mount beneath it
# that is not crossed; one answer for all, whatever exists outside. EAGAIN is what the kernel
# answers, again and again, to a lookup raced by renames.
_OS_ERRORS: Final[Mapping[int, tuple[MCPErrorCode, str]]] = {
    errno.ENOENT: (MCPErrorCode.VALIDATION_ERROR, "does not exist"),
    errno.ENOTDIR: (MCPErrorCode.VALIDATION_ERROR, "has a component that is not a directory"),
    errno.EISDIR: (MCPErrorCode.VALIDATION_ERROR, "names a directory, not a file"),
    errno.ENAMETOOLONG: (
        MCPErrorCode.VALIDATION_ERROR,
        "has a name, or resolves to a path, longer than the file system or the sandbox allows",
    ),
    errno.EXDEV: (MCPErrorCode.ACCESS_DENIED, OUTSIDE),
    errno.ELOOP: (
        MCPErrorCode.ACCESS_DENIED,
        "meets more than 40 symbolic links (a loop), or a /proc link the sandbox never follows",
    ),
    errno.EACCES: (MCPErrorCode.ACCESS_DENIED, _PERMISSION),
    errno.EPERM: (MCPErrorCode.ACCESS_DENIED, _PERMISSION),
    errno.EAGAIN: (MCPErrorCode.ACCESS_DENIED, CHANGED),
}


def subject_of(untrusted_path: str) -> str:
    """How problems refer to the caller's path: quoted and bounded, or not at all if absolute.

    An absolute path is the caller's own text, but it is also a host path: it is never
    repeated.
    """
    if untrusted_path.startswith("/"):
        return "The absolute path"
    return quote(untrusted_path, MAX_ECHO_CHARS)


def refusal(
    code: MCPErrorCode, subject: str, phrase: str, field: str = "relative_path"
) -> ToolFailure:
    """A problem about the caller's path (or another argument), as an in-band failure."""
    return ToolFailure(f"{subject} {phrase}", code=code, invalid_params=(field,))


def os_failure(exc: OSError, subject: str, tool: str) -> ToolFailure:
    """The problem for an OS error met while serving `subject`.

    Args:
        exc: The error: one of the resolution's own refusals, or the kernel's errno.
        subject: How the caller's path is quoted.
        tool: The tool's name, for the log line of an unexpected error.

    Returns:
        The failure to raise: the table's problem, a retryable shortage, or a generic
        internal error whose errno name (never the path or the OS text) goes to the log.
    """
    own = _OWN_REFUSALS.get(type(exc))
    if own is not None:
        return refusal(own[0], subject, own[1])
    error = exc.errno
    if error in RESOURCE_ERRORS:
        logger.warning("%s: %s", tool, errno.errorcode[error])
        return ToolFailure(
            _SHORTAGE, code=MCPErrorCode.INTERNAL_ERROR, metadata={"retryable": True}
        )
    row = _OS_ERRORS.get(error) if error is not None else None
    if row is None:
        logger.warning("%s: unexpected OS error %s", tool, errno.errorcode.get(error or 0))
        return ToolFailure(
            "The file could not be read because of a server-side file system error.",
            code=MCPErrorCode.INTERNAL_ERROR,
        )
    code, phrase = row
    return refusal(code, subject, phrase)
