"""The sandbox root, opened once at start-up and held by its descriptor.

This part of `sandbox_fs_read` runs before the session starts, so it imports only the
standard library: start-up latency is user-visible, and the tool's own models load on its
first call.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mcp_server_suite.config import ConfigError

__all__ = ["DIRECTORY_FLAGS", "OpenedRoot", "open_root"]

# Directories, the root included, are opened as O_PATH handles: they only anchor the next
# openat, and O_PATH needs search permission alone, like the kernel's own path lookup, so a
# world-traversable but unreadable directory still works. O_NOFOLLOW makes a symlink fail
# (the kernel reports ENOTDIR because of O_DIRECTORY) instead of being followed.
DIRECTORY_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class OpenedRoot:
    """The canonical root path, and the descriptor every read walks from."""

    path: str
    fd: int

    def close(self) -> None:
        """Close the descriptor (for a root whose tool was never loaded)."""
        os.close(self.fd)


def open_root(configured_path: Path) -> OpenedRoot:
    """Resolve the configured root once and open its canonical directory.

    The configured path may be reached through symlinks; after this, reads walk from the
    descriptor, so renaming or replacing the path cannot redirect them.

    Args:
        configured_path: The value of `MCP_SAFE_DATA_DIR`, an absolute directory path.

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
    return OpenedRoot(canonical, fd)
