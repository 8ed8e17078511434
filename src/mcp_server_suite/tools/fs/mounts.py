"""Which mount a descriptor is on, and what kind of file system that mount is.

The kernel's own lookup (`openat2` with `RESOLVE_NO_XDEV`) refuses to cross a mount by
itself; the walk in Python that stands in for it where `openat2` is missing (or `/proc` is)
must tell mounts apart the same way. The device number alone cannot: a bind mount of a
directory of the same file system has the same one. The mount ID can, and three sources give
it, none of which is always there (`MountIDs`): `statx` (Linux 5.8), `name_to_handle_at` (for
file systems that hand out file handles) and `/proc/self/fdinfo`. The first that answers for
the root is used for every lookup; where none does, a lookup that would have to tell is
refused rather than guessed (rule 1 of `resolution.py`).

The file system's type comes from `fstatfs`, which needs no `/proc` either. It decides two
things: whether a read may run on the event loop (only where no operation can wait for a
network or a user-space daemon, `INLINE_FILESYSTEMS`), and whether a mount is a kernel
interface that is never read, even where mounts are crossed (`PSEUDO_FILESYSTEMS`).
"""

import enum
import errno
import os
from typing import Final

from mcp_server_suite.tools.fs import _syscalls

__all__ = [
    "INLINE_FILESYSTEMS",
    "MEMORY_FILESYSTEMS",
    "PSEUDO_FILESYSTEMS",
    "MountIDs",
    "filesystem_type",
    "mount_id",
    "probe_mount_ids",
]

# The magic numbers of linux/magic.h that this module names. Several types share one
# (ext2, ext3 and ext4; every FUSE file system), which is all `fstatfs` can tell.
_MAGIC: Final = {
    0xEF53: "ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0xF2F52010: "f2fs",
    0xCA451A4E: "bcachefs",
    0x3153464A: "jfs",
    0x2FC12FC1: "zfs",
    0x4D44: "vfat",
    0x2011BAB0: "exfat",
    0x7366746E: "ntfs3",
    0x73717368: "squashfs",
    0xE0F5E1E2: "erofs",
    0x9660: "iso9660",
    0x01021994: "tmpfs",
    0x858458F6: "ramfs",
    0x65735546: "fuse",
    0x794C7630: "overlay",
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x01021997: "9p",
    0x00C36400: "ceph",
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x0027E0EB: "cgroup",
    0x63677270: "cgroup2",
    0xCAFE4A11: "bpf",
    0x62656570: "configfs",
    0xDE5E81E4: "efivarfs",
    0x6165676C: "pstore",
    0x1CD1: "devpts",
    0x19800202: "mqueue",
    0x65735543: "fusectl",
    0xF97CFF8C: "selinuxfs",
    0x43415D53: "smackfs",
    0x5A3C69F0: "apparmorfs",
    0x42494E4D: "binfmt_misc",
    0x6E736673: "nsfs",
    0x0187: "autofs",
    0x07655821: "resctrl",
    0x6C6F6F70: "binderfs",
    0x67596969: "rpc_pipefs",
    0x6E667364: "nfsd",
    0xABBA1974: "xenfs",
    0x9FA1: "openpromfs",
    0x9FA2: "usbdevfs",
}

# Block-device and memory file systems: opening, `fstat` and a cached read never wait for
# anything but memory, and the inline path asks the kernel for cached data only
# (`RESOLVE_CACHED`, `RWF_NOWAIT`), so no disk read happens on the event loop either. Not
# listed, so always read in a worker thread: network file systems (nfs, cifs, 9p, ceph...),
# FUSE (its daemon can hang), and overlayfs (its layers can be any of those).
INLINE_FILESYSTEMS: Final = frozenset(
    {
        "ext4",
        "xfs",
        "btrfs",
        "f2fs",
        "bcachefs",
        "jfs",
        "zfs",
        "vfat",
        "exfat",
        "ntfs3",
        "squashfs",
        "erofs",
        "iso9660",
        "tmpfs",
        "ramfs",
    }
)

# File systems whose data always sits in memory: `RWF_NOWAIT` is not needed there, and tmpfs
# refuses it (EOPNOTSUPP, on Linux 6.18 still).
MEMORY_FILESYSTEMS: Final = frozenset({"tmpfs", "ramfs"})

# Kernel interfaces mounted as file systems: their files are views of the kernel's and of
# processes' state (procfs holds the server's own environment and memory, readable at any
# offset), not data anyone stored. They are never read, even where mounts are crossed, and
# none can be the sandbox root.
PSEUDO_FILESYSTEMS: Final = frozenset(
    {
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "cgroup",
        "cgroup2",
        "bpf",
        "configfs",
        "efivarfs",
        "pstore",
        "devpts",
        "mqueue",
        "fusectl",
        "selinuxfs",
        "smackfs",
        "apparmorfs",
        "binfmt_misc",
        "nsfs",
        "autofs",
        "resctrl",
        "binderfs",
        "rpc_pipefs",
        "nfsd",
        "xenfs",
        "openpromfs",
        "usbdevfs",
    }
)

# fdinfo is a few hundred bytes; one read of 4 KiB takes it whole.
_FDINFO_BYTES: Final = 4096


class MountIDs(enum.Enum):
    """Where mount IDs come from, in the order they are tried."""

    STATX = "statx"
    HANDLE = "name_to_handle_at"
    FDINFO = "/proc/self/fdinfo"


def _fdinfo_mount_id(fd: int) -> int | None:
    # Errors other than a missing /proc (EMFILE above all) are raised: a lookup that could
    # not ask is not a lookup that found another mount.
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        text = os.read(info, _FDINFO_BYTES)
    finally:
        os.close(info)
    for line in text.splitlines():
        if line.startswith(b"mnt_id:"):
            return int(line[7:])
    return None


def mount_id(fd: int, source: MountIDs) -> int | None:
    """The ID of the mount `fd` is on, or None where `source` cannot tell for this descriptor.

    `name_to_handle_at` cannot tell on a file system without file handles (procfs, sysfs),
    and fdinfo cannot once `/proc` is gone.

    Raises:
        OSError: The source failed (`EMFILE`, `ENOMEM`...): not an answer about the mount.
    """
    if source is MountIDs.STATX:
        return _syscalls.statx_mount_id(fd)
    if source is MountIDs.HANDLE:
        try:
            return _syscalls.handle_mount_id(fd)
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                return None
            raise
    return _fdinfo_mount_id(fd)


def probe_mount_ids(fd: int) -> tuple[MountIDs, int] | None:
    """The first source that tells the mount of `fd` (the root), and that mount's ID.

    Returns:
        The source and the ID, or None where no source answers: no `statx` mount IDs (before
        Linux 5.8, or refused by a seccomp filter), no file handles for this file system,
        and no `/proc`.
    """
    for source in MountIDs:
        try:
            found = mount_id(fd, source)
        except OSError:
            continue
        if found is not None:
            return source, found
    return None


def filesystem_type(fd: int) -> str:
    """The type of the file system `fd` is on (`ext4`, `proc`, `fuse`), from `fstatfs`.

    A type this module does not name is its magic number in hexadecimal, which is in no
    table: never read inline, never taken for a pseudo file system.

    Raises:
        OSError: `fstatfs` failed.
    """
    magic = _syscalls.filesystem_magic(fd)
    return _MAGIC.get(magic, f"0x{magic:x}")
