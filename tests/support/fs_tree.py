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
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BIG_FILE_BYTES",
    "CANARY",
    "OUTSIDE_SECRETS",
    "FSTree",
    "SandboxTree",
    "build_fs_tree",
    "build_sandbox_tree",
    "ensure_complete",
    "make_unix_socket",
    "mounted",
    "remove_deep_tree",
    "sandbox_tree",
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


# --- the round 2 fixture -------------------------------------------------------------------

# The canary every outside secret holds: it must never appear in an answer or on stderr.
CANARY = "CANARY_OUTSIDE_9d41f0"

# The round 2 corpus's names (`tests/vectors/fs.json`): the root and the sibling that holds
# the secrets, side by side in one base directory.
ROOT_NAME = "sbx_root"
OUTSIDE_NAME = "outside"

# Depth of the tree the length cases walk: `d/` 2,045 times and `ab.txt` are exactly 4,096
# characters, and its joined absolute path is longer than PATH_MAX.
DEEP_LEVELS = 2045

# Chains of symbolic links: 40 the kernel follows, 41 it refuses.
CHAIN_OK = 40
CHAIN_TOO_LONG = 41

NUL_MEBIBYTE = 1024 * 1024
SPARSE_BYTES = 1024**3


@dataclass(frozen=True)
class SandboxTree:
    """The round 2 fixture.

    Attributes:
        base: The directory holding the root, the outside and the root's alias.
        root: The sandbox root (`base/sbx_root`).
        outside: The secrets (`base/outside`), each holding `CANARY`.
        root_link: A symbolic link to the root (`base/rootlink`), for the configured-alias case.
    """

    base: Path
    root: Path
    outside: Path
    root_link: Path

    def expand(self, payload: str) -> str:
        """Replace `{ROOT}`, `{ROOTNAME}` and `{BASE}` with this tree's values."""
        return (
            payload.replace("{ROOTNAME}", ROOT_NAME)
            .replace("{ROOT}", str(self.root))
            .replace("{BASE}", str(self.base))
        )


def _deep_tree(root: Path) -> None:
    # Deeper than PATH_MAX joined to the root: made one level at a time from descriptors.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEEP_LEVELS):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("ab.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"exactly4096\n")
        os.close(leaf)
        os.symlink("ab.txt", "lnk", dir_fd=fd)
    finally:
        os.close(fd)


def build_sandbox_tree(base: Path) -> SandboxTree:
    """Build the round 2 fixture under `base`, which must not exist yet.

    What the corpus's README describes, with the names its cases use: links of every kind,
    special files under `.txt` names, odd names, encodings, big, sparse and deep files. The
    mounts beneath the root (a bind mount of the outside, a procfs) are made by the tests
    that need them, with `mounted`, so that a failed test never leaves one behind.

    Raises:
        PermissionError: Not run as root (device nodes need it; CI runs as root).
    """
    base.mkdir()
    root, outside = base / ROOT_NAME, base / OUTSIDE_NAME
    for directory in (root / "sub" / "deeper", outside, root / "x.txt", root / "race"):
        directory.mkdir(parents=True)
    secret = f"TOP SECRET {CANARY}\n".encode()
    (outside / "secret.txt").write_bytes(secret)
    (outside / "hl_secret.txt").write_bytes(secret)
    (outside / "F").write_bytes(secret)
    (outside / "L").symlink_to("nowhere")
    (outside / "sub").mkdir()
    (outside / "sub" / "ok.txt").write_bytes(secret)

    files = {
        "ok.txt": b"hello\n",
        "sub/inner.txt": b"inner\n",
        "sub/deeper/d.txt": b"deep\n",
        "race/target.txt": b"inside\n",
        "cr\rname.txt": b"cr\n",
        "tab\tname.txt": b"tab\n",
        "back\\slash.txt": b"backslash\n",
        "nfd_cafe\u0301.txt": b"nfd\n",
        "rlo_\u202etxt.exe": b"rlo\n",
        "nbsp\u00a0name.txt": b"nbsp\n",
        "ls\u2028x.txt": b"u2028\n",
        "del\x7fname.txt": b"del\n",
        "n" * 255: b"name_max\n",
        "mode000.txt": b"mode000\n",
        "u16bom.txt": "hi\u00e9".encode("utf-16"),
        "u16nobom.txt": "hi\u00e9".encode("utf-16-le"),
        "u8sig.txt": "sig".encode("utf-8-sig"),
        "latin1.txt": "caf\u00e9 na\u00efve\n".encode("latin-1"),
        "cp1252_undefined.txt": b"a\x81b\x8dc",
        "utf7_bidi.txt": b"abc+IC4-def\n",
        "iso2022.txt": "\u65e5\u672c\u8a9e".encode("iso2022_jp"),
        "gb18030.txt": "\u4e2d\u6587\U0001f600".encode("gb18030"),
        "invalid_utf8.txt": b"ok\xc3(\n",
        "cesu8.txt": b"\xed\xa0\xbd\xed\xb8\x80",
        "bidi_content.txt": "a\u202eb\u200bc\U000e0041d\u2066e\x00f".encode(),
        "c1_controls.txt": "a\u0085b\u009bc".encode(),
        "emoji.txt": "\U0001f600".encode(),
        "nul.txt": b"a\x00b\x00c",
        "nonascii.txt": "na\u00efve\n".encode(),
        "nul_1mib.bin": b"\x00" * NUL_MEBIBYTE,
        "text_2mib.txt": b"0123456789abcdef" * (2 * 1024 * 1024 // 16),
    }
    for name, content in files.items():
        (root / name).write_bytes(content)
    os.chmod(root / "mode000.txt", 0)
    (root / b"lat\xe9.txt".decode("utf-8", "surrogateescape")).write_bytes(b"latin name\n")
    with open(root / "sparse_1gib.bin", "wb") as sparse:
        sparse.truncate(SPARSE_BYTES)

    for mode in (0o644, 0o311, 0o000):
        directory = root / f"dir{mode:03o}"
        directory.mkdir()
        (directory / "f.txt").write_bytes(b"in a locked directory\n")
        os.chmod(directory, mode)

    links = {
        "c1": "c2",
        "c2": "c3",
        "c3": "sub/inner.txt",
        "slash": "/",
        "dotdot": "..",
        "me": ".",
        "rootabs": str(root),
        "pr": "/proc/self/root",
        "pcwd": "/proc/self/cwd",
        **{f"pfd{fd}": f"/proc/self/fd/{fd}" for fd in range(3, 13)},
        "dang_rel": "nope",
        "dang_abs": "/nonexistent/nope",
        "ld": "ld/x",
        "lsub": "sub",
        "link_in": "ok.txt",
        "msl": "sub//./inner.txt",
        "ts_slash": "ok.txt/",
        "ts_dot": "ok.txt/.",
        "lfifo": "fifo",
        "out_rel": "../outside/secret.txt",
        "out_abs": str(outside / "secret.txt"),
        "out_dir": "../outside",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    for prefix, length in (("k40", CHAIN_OK), ("k41", CHAIN_TOO_LONG)):
        for index in range(length - 1):
            (root / f"{prefix}_{index}").symlink_to(f"{prefix}_{index + 1}")
        (root / f"{prefix}_{length - 1}").symlink_to("ok.txt")

    os.link(outside / "hl_secret.txt", root / "hard_out")
    os.mkfifo(root / "fifo")
    make_unix_socket(root / "sock")
    os.mknod(root / "zero.txt", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    os.mknod(root / "tty.txt", 0o666 | stat.S_IFCHR, os.makedev(5, 0))
    os.mknod(root / "blk.txt", 0o660 | stat.S_IFBLK, os.makedev(7, 0))
    (root / "bindout").mkdir()
    (root / "bindfile.txt").write_bytes(b"plain file under a bind mount\n")
    (root / "procfs").mkdir()
    _deep_tree(root)
    (base / "rootlink").symlink_to(root)
    return SandboxTree(base=base, root=root, outside=outside, root_link=base / "rootlink")


def remove_deep_tree(root: Path, name: str = "d") -> None:
    """Remove a chain of directories `name` one level at a time, with whatever each holds
    besides the next: recursive removal runs out of stack thousands of levels down."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    opened = [fd]
    try:
        while name in os.listdir(fd):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            opened.append(fd)
        while len(opened) > 1:
            innermost = opened.pop()
            for entry in os.listdir(innermost):
                os.unlink(entry, dir_fd=innermost)
            os.close(innermost)
            os.rmdir(name, dir_fd=opened[-1])
    finally:
        for each in opened:
            os.close(each)


@contextmanager
def sandbox_tree() -> Iterator[SandboxTree]:
    """`build_sandbox_tree` in a temporary directory of its own, removed afterwards.

    Not under pytest's temporary directory: pytest removes old ones recursively, and the
    2,045-level tree would exhaust its stack (Python 3.11's `shutil.rmtree` recurses) if a run
    were killed before this removed it.
    """
    base = Path(tempfile.mkdtemp(prefix="mcp-fs-tree-"))
    try:
        tree = build_sandbox_tree(base / "base")
        try:
            yield tree
        finally:
            remove_deep_tree(tree.root)
    finally:
        for directory in base.rglob("dir*"):
            if directory.is_dir() and not directory.is_symlink():
                directory.chmod(0o755)
        shutil.rmtree(base)


@contextmanager
def mounted(source: str, target: Path, *options: str) -> Iterator[None]:
    """Mount `source` on `target` for the body (`mount --bind`, `-t proc`...), then unmount.

    Needs root; CI runs as root.
    """
    subprocess.run(["mount", *options, source, str(target)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)
