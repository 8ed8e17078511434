"""Which mount a descriptor is on, and what kind of file system that mount is.

The kernel's own lookup (`openat2` with `RESOLVE_NO_XDEV`) refuses to cross a mount by
itself; the walk in Python that stands in for it where `openat2` is missing must tell mounts
apart the same way. The device number alone cannot: a bind mount of a directory of the same
file system has the same one. The mount ID can, and `/proc/self/fdinfo` has reported it for
every descriptor since Linux 3.15. Where `/proc` is not mounted, only the device number is
left, and the README says what that means.

The file system type decides whether a read may run on the event loop: only where no
operation can wait for a network or a user-space daemon (see `INLINE_FILESYSTEMS`).
"""

import os
from typing import Final

__all__ = ["INLINE_FILESYSTEMS", "MEMORY_FILESYSTEMS", "filesystem_type", "mount_id"]

# Block-device and memory file systems: opening, `fstat` and a cached read never wait for
# anything but memory, and the inline path asks the kernel for cached data only
# (`RESOLVE_CACHED`, `RWF_NOWAIT`), so no disk read happens on the event loop either. Not
# listed, so always read in a worker thread: network file systems (nfs, cifs, 9p, ceph...),
# FUSE (its daemon can hang), and overlayfs (its layers can be any of those).
INLINE_FILESYSTEMS: Final = frozenset(
    {
        "ext2",
        "ext3",
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

# fdinfo and mountinfo are a few hundred bytes per line; 64 KiB reads take a file in a few
# calls without holding much.
_READ_CHUNK_BYTES: Final = 64 * 1024


def _read_proc(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, _READ_CHUNK_BYTES):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def mount_id(fd: int) -> int | None:
    """The ID of the mount `fd` is on, or None where `/proc` cannot tell."""
    info = _read_proc(f"/proc/self/fdinfo/{fd}")
    if info is None:
        return None
    for line in info.splitlines():
        if line.startswith(b"mnt_id:"):
            return int(line[7:])
    return None


def filesystem_type(fd: int) -> str | None:
    """The type of the file system `fd` is on (`ext4`, `proc`, `fuse.sshfs`), or None.

    Read from `/proc/self/mountinfo`, the line of the descriptor's mount: mount ID, parent
    ID, device, root, mount point, options, optional fields ending in `-`, then the type.
    """
    mount = mount_id(fd)
    table = _read_proc("/proc/self/mountinfo")
    if mount is None or table is None:
        return None
    prefix = b"%d " % mount
    for line in table.splitlines():
        if line.startswith(prefix):
            _, separator, rest = line.partition(b" - ")
            if separator:
                return rest.split(b" ", 1)[0].decode("ascii", "replace")
    return None
