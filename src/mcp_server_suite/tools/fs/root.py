"""The sandbox root: opened once at start-up and held by its descriptor.

This part of the file tools runs before the session starts, so it imports only the standard
library: start-up latency is user-visible, and the tools' own models load on their first call.

Rules:

1. The configured path is resolved once (it may be reached through symbolic links) and its
   canonical directory is opened as an `O_PATH` handle. Every lookup starts from that
   descriptor, so renaming or replacing the root's path later cannot redirect one.
2. The descriptor is shared by the tools that serve the root, and closed only when the last
   of them is done with it and no lookup is still using it: closing it under a worker thread
   would let a reused descriptor number anchor that lookup somewhere else.
"""

import enum
import os
import threading
from pathlib import Path
from typing import Final

from mcp_server_suite.config import ConfigError

__all__ = ["DIRECTORY_FLAGS", "SandboxClosed", "SandboxRoot", "open_root"]

# Directories, the root included, are opened as O_PATH handles: they only anchor lookups, and
# O_PATH needs search permission alone, like the kernel's own path lookup, so a
# world-traversable but unreadable directory still works. O_NOFOLLOW makes a symlink fail
# (the kernel reports ENOTDIR because of O_DIRECTORY) instead of being followed.
DIRECTORY_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxClosed(Exception):
    """The root was closed because the server is shutting down."""


class _State(enum.Enum):
    OPEN = enum.auto()
    # Closed to new lookups; the last lookup in flight releases the descriptor.
    CLOSING = enum.auto()
    CLOSED = enum.auto()


class SandboxRoot:
    """The sandbox directory, held by descriptor.

    Args:
        path: The canonical path the descriptor was opened at (no symlink in it).
        fd: The `O_PATH` descriptor; owned from now on.
        holders: How many tools share it; each calls `close` once.
    """

    def __init__(self, path: str, fd: int, *, holders: int = 1) -> None:
        self.path: Final = path
        self.names: Final = tuple(name for name in path.split("/") if name)
        self._fd: Final = fd
        self._lock: Final = threading.Lock()
        self._state = _State.OPEN
        self._holders = holders
        self._lookups = 0

    def acquire(self) -> int:
        """Borrow the descriptor for one lookup; give it back with `release`.

        Raises:
            SandboxClosed: The root is closing.
        """
        with self._lock:
            if self._state is not _State.OPEN:
                raise SandboxClosed
            self._lookups += 1
            return self._fd

    def release(self) -> None:
        """Give back a descriptor borrowed with `acquire`."""
        with self._lock:
            self._lookups -= 1
            if self._state is _State.CLOSING and self._lookups == 0:
                self._release()

    def close(self) -> None:
        """One holder is done: after the last, refuse new lookups and release the descriptor.

        The descriptor is closed once the lookups in flight finish. Calls beyond the number
        of holders do nothing.
        """
        with self._lock:
            if self._state is not _State.OPEN:
                return
            self._holders -= 1
            if self._holders > 0:
                return
            self._state = _State.CLOSING
            if self._lookups == 0:
                self._release()

    async def aclose(self) -> None:
        """`close`, as the registry's shutdown hook."""
        self.close()

    def _release(self) -> None:
        # Called with the lock held, exactly once.
        self._state = _State.CLOSED
        os.close(self._fd)


def open_root(configured_path: Path, *, holders: int = 1) -> SandboxRoot:
    """Resolve the configured root once and open its canonical directory.

    Args:
        configured_path: The value of `MCP_SAFE_DATA_DIR`, an absolute directory path.
        holders: How many tools will share the root.

    Returns:
        The opened root.

    Raises:
        ConfigError: The directory cannot be resolved or opened.
    """
    try:
        canonical = os.path.realpath(configured_path, strict=True)
        fd = os.open(canonical, DIRECTORY_FLAGS)
    except OSError:
        raise ConfigError(
            "MCP_SAFE_DATA_DIR",
            "an absolute path to a directory the server can open",
            str(configured_path),
        ) from None
    return SandboxRoot(canonical, fd, holders=holders)
