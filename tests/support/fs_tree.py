"""The sandbox fixture tree of the path attack corpus, built in Python.

`build_fs_tree(base)` makes the same tree as the corpus's `fs_fixture.sh` (see
`tests/vectors/README.md`): `base/root` is the sandbox, `base/outside` holds the secrets a
read must never return, and `base/root_evil` is the sibling whose name starts with the
root's name (the CVE-2025-53110 shape). Every entry of the shell script is made here, in
the same order, with the same bytes.

Two entries need privileges or a short path: the character device (`mknod`) needs root, and
a Unix socket path must fit in `sun_path` (108 bytes). CI runs as root and the tree lives
under pytest's short temporary directory, so both are always made there; `FSTree.missing`
names anything that could not be made, and `ensure_complete` fails the tests rather than let
them skip. A build that runs unprivileged by design (the Nix package's check phase) names
the entries it cannot make in `FS_TREE_MAY_LACK` and deselects the tests that use them.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BIG_FILE_BYTES",
    "OUTSIDE_SECRETS",
    "FSTree",
    "build_fs_tree",
    "ensure_complete",
    "make_unix_socket",
]

# The shell script writes 5 MiB of 'a' with `head -c 5242880`; it is far above the largest
# `max_bytes` (1 MiB), so the cap, not the end of the file, always stops the read.
BIG_FILE_BYTES = 5 * 1024 * 1024

# Contents that exist only outside the sandbox: a read that returns any of them escaped.
# The hard-linked secret is readable by design (see the residual risks) and is not listed.
OUTSIDE_SECRETS = (b"TOP SECRET outside\n", b"sibling secret\n")

# `sun_path` in `struct sockaddr_un` is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH_BYTES = 107


@dataclass(frozen=True)
class FSTree:
    """Where the fixture lives.

    Attributes:
        base: The directory that holds the three trees.
        root: The sandbox root.
        outside: A sibling of the root holding secrets.
        evil: The sibling whose name has the root's name as a string prefix.
        missing: Entries that could not be made on this machine (empty in CI).
    """

    base: Path
    root: Path
    outside: Path
    evil: Path
    missing: tuple[str, ...] = field(default=())

    def expand(self, payload: str) -> str:
        """Replace the corpus placeholders `{ROOT}` and `{BASE}` with this tree's paths."""
        return payload.replace("{ROOT}", str(self.root)).replace("{BASE}", str(self.base))


def make_unix_socket(path: Path) -> None:
    """Bind a Unix socket at `path` and close it, leaving the socket file behind.

    Raises:
        ValueError: The path does not fit in `sun_path`.
        OSError: The socket could not be bound.
    """
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
        raise ValueError(f"socket path longer than {_MAX_SOCKET_PATH_BYTES} bytes: {path}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(os.fsencode(path))


def build_fs_tree(base: Path) -> FSTree:
    """Build the corpus fixture under `base`, which must not exist yet.

    Args:
        base: A directory path that does not exist; its parent must.

    Returns:
        The tree's locations.

    Raises:
        FileExistsError: `base` already exists.
    """
    base.mkdir()
    root, outside, evil = base / "root", base / "outside", base / "root_evil"
    for directory in (root / "sub" / "deeper", outside, evil, root / "%2e%2e", root / "dir_only"):
        directory.mkdir(parents=True)

    files = {
        root / "ok.txt": b"hello\n",
        root / "sub" / "inner.txt": b"inner\n",
        root / "sub" / "deeper" / "d.txt": b"deep\n",
        outside / "secret.txt": b"TOP SECRET outside\n",
        outside / "secret_hl.txt": b"hardlinked secret\n",
        evil / "secret.txt": b"sibling secret\n",
        root / "%2e%2e" / "literal.txt": b"literal percent dir\n",
        root / "...": b"three dots\n",
        root / "..foo": b"dotdot prefix\n",
        root / "foo..": b"dotdot suffix\n",
        root / "Case.txt": b"Case\n",
        root / "caf\u00e9.txt": b"cafe nfc\n",
        root / "new\nline.txt": b"newline name\n",
        root / "empty.txt": b"",
        root / "big.txt": b"a" * BIG_FILE_BYTES,
        root / "binary.bin": b"\xff\xfe\x00\x01binary\x80",
    }
    for path, content in files.items():
        path.write_bytes(content)

    links = {
        "link_out": str(outside / "secret.txt"),
        "link_out_rel": "../outside/secret.txt",
        "link_in": "ok.txt",
        "link_in_dir": "sub",
        "link_dir_out": str(outside),
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "self_loop": "self_loop",
        "dangling": "does_not_exist",
        "dangling_out": str(outside / "created_later"),
        "zero": "/dev/zero",
        "proc_root": "/proc/self/root",
        "link_evil": str(evil),
    }
    for name, target in links.items():
        (root / name).symlink_to(target)

    os.link(outside / "secret_hl.txt", root / "hard_out")
    os.mkfifo(root / "fifo")

    missing: list[str] = []
    try:
        # The same device as /dev/null (character device 1:3).
        os.mknod(root / "null_dev", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        missing.append("null_dev")
    try:
        make_unix_socket(root / "sock")
    except (OSError, ValueError):
        missing.append("sock")

    (base / "root_via_link").symlink_to(root)
    return FSTree(base=base, root=root, outside=outside, evil=evil, missing=tuple(missing))


def ensure_complete(built: FSTree) -> FSTree:
    """Fail unless every entry was made, or its absence is declared in `FS_TREE_MAY_LACK`."""
    allowed = {name for name in os.environ.get("FS_TREE_MAY_LACK", "").split(",") if name}
    lacking = set(built.missing) - allowed
    if lacking:
        raise AssertionError(f"fixture entries not made on this machine: {sorted(lacking)}")
    return built
