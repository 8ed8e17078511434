#!/usr/bin/env python3
"""Fetch a pinned uv from PyPI into a directory, with nothing but the Python standard library.

For machines that have Python and nothing else: Debian 12 refuses `pip install --user`
(PEP 668, "externally-managed-environment"), and a stock install has neither pip nor venv's
ensurepip. uv is published on PyPI as a wheel holding its static binary, so the wheel for this
machine is downloaded from the package index, checked against the SHA-256 pinned below, and
its `uv` and `uvx` are unpacked into the directory given. Nothing is installed system-wide.

The index is `UV_DEFAULT_INDEX` (or the older `UV_INDEX_URL`) when set, as uv itself reads it,
and PyPI otherwise; it must serve the JSON simple API (PEP 691), as PyPI does. Proxies come
from the usual `https_proxy` variables.

Usage: scripts/bootstrap-uv.py DIRECTORY
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Final

UV_VERSION: Final = "0.13.9"

# The wheel for each (machine, C library), from PyPI's listing of uv 0.13.9. The aarch64
# wheel is tagged for both glibc and musl.
_AARCH64: Final = (
    "uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
    "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
)
WHEELS: Final = {
    ("x86_64", "glibc"): (
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    ("x86_64", "musl"): (
        "uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl",
        "2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25",
    ),
    ("aarch64", "glibc"): _AARCH64,
    ("aarch64", "musl"): _AARCH64,
}

DEFAULT_INDEX: Final = "https://pypi.org/simple"

# The wheels are about 18 MB; anything far larger is not the file that was pinned.
MAX_WHEEL_BYTES: Final = 64 * 1024 * 1024

# A slow mirror gets this long per request before the bootstrap gives up with a message.
TIMEOUT_S: Final = 60

_PROGRAMS: Final = ("uv", "uvx")
_HELP: Final = "install uv yourself (https://docs.astral.sh/uv/) and run again"


class BootstrapError(Exception):
    """A step failed; the message says which, and what to do."""


def machine_key() -> tuple[str, str]:
    """This machine's (architecture, C library), as `WHEELS` is keyed."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine, "glibc" if platform.libc_ver()[0] == "glibc" else "musl"


def wheel_for_this_machine() -> tuple[str, str]:
    key = machine_key()
    if sys.platform != "linux" or key not in WHEELS:
        raise BootstrapError(f"no pinned uv wheel for {sys.platform} {key[0]}: {_HELP}")
    return WHEELS[key]


def fetch(url: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            data: bytes = response.read(MAX_WHEEL_BYTES + 1)
    except OSError as exc:
        raise BootstrapError(f"cannot download {url} ({exc}): {_HELP}") from None
    if len(data) > MAX_WHEEL_BYTES:
        raise BootstrapError(f"{url} is larger than {MAX_WHEEL_BYTES} bytes: {_HELP}")
    return data


def wheel_url(index: str, filename: str) -> str:
    page = index.rstrip("/") + "/uv/"
    listing = fetch(page, "application/vnd.pypi.simple.v1+json")
    try:
        files = json.loads(listing)["files"]
        url = next(entry["url"] for entry in files if entry["filename"] == filename)
    except (ValueError, KeyError, TypeError, StopIteration):
        raise BootstrapError(f"{page} does not list {filename} (PEP 691 JSON): {_HELP}") from None
    return urllib.parse.urljoin(page, str(url))


def check_digest(wheel: bytes, filename: str, sha256: str) -> None:
    if hashlib.sha256(wheel).hexdigest() != sha256:
        raise BootstrapError(f"{filename} does not have its pinned SHA-256: {_HELP}")


def unpack(wheel: bytes, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
        for program in _PROGRAMS:
            data = archive.read(f"uv-{UV_VERSION}.data/scripts/{program}")
            # Written beside its final name and renamed, so a half-written binary never runs.
            fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{program}-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, 0o755)  # noqa: S103  # An executable for its owner and others.
            os.replace(temporary, directory / program)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    directory = Path(argv[0])
    index = os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or DEFAULT_INDEX
    try:
        filename, sha256 = wheel_for_this_machine()
        print(f"uv is not installed: fetching uv {UV_VERSION} into {directory}", file=sys.stderr)
        wheel = fetch(wheel_url(index, filename))
        check_digest(wheel, filename, sha256)
        unpack(wheel, directory)
    except BootstrapError as exc:
        print(f"bootstrap-uv: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
