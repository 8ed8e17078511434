"""How each way a lookup or a read can fail is told to the caller.

A problem quotes at most `MAX_ECHO_CHARS` characters of the caller's own path, escaped, and
never an absolute path, the root, or the text of an OS error. Errors the caller can fix by
asking for another path are validation errors; refusals of what exists are access denials;
any errno not in the table is a server-side fault, reported generically.
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
    "SPECIAL_FILE",
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


def os_failure(error: int | None, subject: str, tool: str) -> ToolFailure:
    """The problem for an OS error met while serving `subject`.

    Args:
        error: The errno, or None when the error carried none.
        subject: How the caller's path is quoted.
        tool: The tool's name, for the log line of an unexpected error.

    Returns:
        The failure to raise: the table's problem, or a generic internal error whose errno
        name (never the path or the OS text) goes to the log.
    """
    row = _OS_ERRORS.get(error) if error is not None else None
    if row is None:
        logger.warning("%s: unexpected OS error %s", tool, errno.errorcode.get(error or 0))
        return ToolFailure(
            "The file could not be read because of a server-side file system error.",
            code=MCPErrorCode.INTERNAL_ERROR,
        )
    code, phrase = row
    return refusal(code, subject, phrase)
