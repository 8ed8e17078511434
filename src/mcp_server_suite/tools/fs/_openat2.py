"""The `openat2(2)` system call: path resolution that the kernel confines to a directory.

Python does not wrap `openat2` (3.11 to 3.13 have no `os.openat2`), and the C library has no
wrapper for it either, so this module calls it through `syscall(2)` with `ctypes`. It is the
one place the file tools call into the C library, and it does nothing else: it passes the
caller's flags through and turns a failure into `OSError` with the kernel's errno.

Why `openat2` rather than a walk in Python: with `RESOLVE_BENEATH` the kernel itself refuses
every step of a lookup that would leave the directory (a `..` above it, an absolute path or
symbolic link), in the same lookup that opens the file, so no check can race the open; it
counts symbolic links as it always does (at most 40); `RESOLVE_NO_MAGICLINKS` refuses the
`/proc` links that jump anywhere (`/proc/self/root`, `/proc/<pid>/fd/N`), and
`RESOLVE_NO_XDEV` refuses to cross into another mount. Linux 5.6 added it; `RESOLVE_CACHED`
(5.12) makes a lookup fail with `EAGAIN` instead of waiting for a disk or a network.
"""

import ctypes
import errno
import os
import platform
from typing import Any, Final

__all__ = [
    "RESOLVE_BENEATH",
    "RESOLVE_CACHED",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "RESOLVE_NO_XDEV",
    "openat2",
]

# The `resolve` bits of `struct open_how` (linux/openat2.h).
RESOLVE_NO_XDEV: Final = 0x01
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
RESOLVE_CACHED: Final = 0x20

# openat2's number in the system call table that every architecture has shared since Linux
# 5.1; the architectures that number system calls their own way (alpha, mips, ia64) are not
# listed, and there the tools use their own walk, as on a kernel without the call.
_SYSCALL_NUMBERS: Final = dict.fromkeys(
    (
        "x86_64",
        "aarch64",
        "arm64",
        "armv7l",
        "armv8l",
        "i386",
        "i686",
        "ppc64le",
        "ppc64",
        "riscv64",
        "s390x",
        "loongarch64",
    ),
    437,
)
_MACHINE_NUMBER: Final = _SYSCALL_NUMBERS.get(platform.machine())


class _OpenHow(ctypes.Structure):
    # struct open_how: three __u64 members, 24 bytes, the size passed to the kernel.
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc: Final = ctypes.CDLL(None, use_errno=True)
# `syscall(2)` without `argtypes` (a function object of its own, not the cached attribute):
# converting five arguments through `argtypes` on every call cost more than the system call
# (about 5 us of 12 per lookup on the benchmark's machine, a read's largest single cost after
# the system calls). Without them ctypes passes each argument as the C type of the object
# given, so the two the kernel reads as full 64-bit values, the call's number and the size
# of `struct open_how`, are ctypes objects built once; the descriptor goes as a C `int`
# (openat2 takes an `int`), the path as a `char *` to the bytes, and the structure by
# reference.
_syscall: Final = _libc["syscall"]
_syscall.restype = ctypes.c_long

# Every lookup uses one of a handful of flag sets: each `struct open_how` is built once and
# kept, with the reference ctypes passes for it.
_hows: dict[tuple[int, int], tuple[_OpenHow, Any]] = {}
_HOW_SIZE: Final = ctypes.c_size_t(ctypes.sizeof(_OpenHow))
_NUMBER: Final = None if _MACHINE_NUMBER is None else ctypes.c_long(_MACHINE_NUMBER)


def openat2(dir_fd: int, path: bytes, flags: int, resolve: int) -> int:
    """Open `path` relative to `dir_fd` as `openat2(2)` resolves it.

    Args:
        dir_fd: The directory the lookup starts from (and, with `RESOLVE_BENEATH`, stays in).
        path: The path, as bytes, without NUL.
        flags: The `open(2)` flags (`O_PATH`, `O_CLOEXEC`, ...).
        resolve: The `RESOLVE_*` bits.

    Returns:
        The new descriptor, which the caller must close.

    Raises:
        OSError: The kernel's errno: `ENOSYS` where the call does not exist (or this
            architecture's number is unknown), `EPERM` or `ENOSYS` where a seccomp filter
            refuses it, `EXDEV` for a lookup that would leave `dir_fd` or cross a mount,
            `ELOOP` for too many symbolic links or a refused link, `EAGAIN` for a lookup
            `RESOLVE_CACHED` could not finish from the caches, and every error of `open(2)`.
    """
    if _NUMBER is None:
        raise OSError(errno.ENOSYS, "openat2 is not numbered on this architecture")
    kept = _hows.get((flags, resolve))
    if kept is None:
        how = _OpenHow(flags, 0, resolve)
        kept = _hows.setdefault((flags, resolve), (how, ctypes.byref(how)))
    fd: int = _syscall(_NUMBER, dir_fd, path, kept[1], _HOW_SIZE)
    if fd < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return fd
