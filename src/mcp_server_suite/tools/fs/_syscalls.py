"""The system calls that tell mounts and file systems apart, which Python does not wrap.

`statx(2)` reports the mount ID of a descriptor (`STATX_MNT_ID`, Linux 5.8),
`name_to_handle_at(2)` reports it too on every kernel since 2.6.39 for file systems that hand
out file handles, and `fstatfs(2)` reports the file system's type as its magic number. None
of them needs `/proc`, which is what they are for: a container or sandbox without `/proc`
must still confine a lookup to the root's mount. Like `_openat2.py`, this module calls the C
library through `ctypes` and does nothing else: a failure is `OSError` with the kernel's errno.
"""

import ctypes
import errno
import os
import platform
import struct
from typing import Any, Final

__all__ = ["STATX_MNT_ID", "filesystem_magic", "handle_mount_id", "statx_mount_id"]

# `statx` flags and mask bits (linux/stat.h, linux/fcntl.h).
_AT_EMPTY_PATH: Final = 0x1000
_AT_SYMLINK_NOFOLLOW: Final = 0x100
STATX_MNT_ID: Final = 0x1000

# `struct statx` is 256 bytes; `stx_mask` is its first member and `stx_mnt_id` (a __u64)
# starts at byte 144 on every architecture (the layout is fixed by the kernel's ABI).
_STATX_BYTES: Final = 256
_STATX_MNT_ID_OFFSET: Final = 144

# `struct file_handle` with room for no handle at all: asked for a handle that does not fit,
# the kernel answers EOVERFLOW and still writes the mount ID, which is all that is wanted.
_HANDLE_HEADER_BYTES: Final = 8

# `struct statfs` is at most 120 bytes on the 64-bit architectures; its first member is the
# type, a `long` except on s390x, where it is an `unsigned int`.
_STATFS_BYTES: Final = 256
_STATFS_TYPE: Final = struct.Struct("=I" if platform.machine() == "s390x" else "=l")

_libc: Final = ctypes.CDLL(None, use_errno=True)


def _function(name: str, *argtypes: Any) -> Any:
    # An old C library may lack a wrapper (statx came with glibc 2.28): then the call is
    # treated as the kernel not having it.
    function = getattr(_libc, name, None)
    if function is not None:  # pragma: no branch - glibc before 2.28 has no statx
        function.restype = ctypes.c_int
        function.argtypes = argtypes
    return function


_statx: Final = _function(
    "statx", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p
)
_name_to_handle_at: Final = _function(
    "name_to_handle_at",
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_int),
    ctypes.c_int,
)
_fstatfs: Final = _function("fstatfs", ctypes.c_int, ctypes.c_void_p)


def _failed() -> OSError:
    error = ctypes.get_errno()
    return OSError(error, os.strerror(error))


def statx_mount_id(fd: int) -> int:
    """The ID of the mount `fd` is on, from `statx` (Linux 5.8).

    Raises:
        OSError: `ENOSYS` where the call or its mount ID is missing (or a seccomp filter
            refuses it, `EPERM`), and the kernel's other errors.
    """
    if _statx is None:
        raise OSError(errno.ENOSYS, "statx is not in this C library")
    buffer = ctypes.create_string_buffer(_STATX_BYTES)
    if _statx(fd, b"", _AT_EMPTY_PATH | _AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, buffer) != 0:
        raise _failed()
    (mask,) = struct.unpack_from("=I", buffer, 0)
    if not mask & STATX_MNT_ID:
        raise OSError(errno.ENOSYS, "statx reports no mount ID before Linux 5.8")
    (mount,) = struct.unpack_from("=Q", buffer, _STATX_MNT_ID_OFFSET)
    return int(mount)


def handle_mount_id(fd: int) -> int:
    """The ID of the mount `fd` is on, from `name_to_handle_at` (Linux 2.6.39).

    Raises:
        OSError: `EOPNOTSUPP` for a file system that hands out no file handles (procfs,
            sysfs...), `ENOSYS` where the call is missing, and the kernel's other errors.
    """
    if _name_to_handle_at is None:
        raise OSError(errno.ENOSYS, "name_to_handle_at is not in this C library")
    handle = ctypes.create_string_buffer(_HANDLE_HEADER_BYTES)
    mount = ctypes.c_int(-1)
    # With no room for a handle the call fails with EOVERFLOW, having written the mount ID.
    result = _name_to_handle_at(fd, b"", handle, ctypes.byref(mount), _AT_EMPTY_PATH)
    failure = _failed()
    if result != 0 and failure.errno == errno.EOVERFLOW and mount.value >= 0:
        return mount.value
    raise failure


def filesystem_magic(fd: int) -> int:
    """The type of the file system `fd` is on, as `fstatfs` reports it (`PROC_SUPER_MAGIC`...).

    Raises:
        OSError: The kernel's errno.
    """
    if _fstatfs is None:
        raise OSError(errno.ENOSYS, "fstatfs is not in this C library")
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if _fstatfs(fd, buffer) != 0:
        raise _failed()
    (magic,) = _STATFS_TYPE.unpack_from(buffer, 0)
    # The type is a signed long: magic numbers with the high bit set come back negative.
    return int(magic) & 0xFFFFFFFF
