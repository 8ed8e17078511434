"""Deselects the tests that only root can run, for a run as another user.

`scripts/test.sh` passes `--deselect-needs-root` when it does not run as root (the option does
nothing for root). The tests marked `root` (bind mounts, a procfs beneath the sandbox, device nodes,
dropping to another uid) and the cases about the sandbox fixture's character device, which
only root can make with mknod (`null_dev`, and the corpus vector `PATH-085` that opens it),
cannot run there: they are deselected, the count is printed on one line, and the fixture is
told that the device may be missing (`FS_TREE_MAY_LACK`). CI runs as root, so every test
runs there; the Nix build, which runs unprivileged too, deselects the
same tests (nix/package.nix).
"""

from __future__ import annotations

import os
from typing import Final

import pytest

__all__ = ["NEEDS_ROOT_CASES", "needs_root"]

# Test ids that hold one of these need the character device only root can make.
NEEDS_ROOT_CASES: Final = ("null_dev", "PATH-085")
_DEVICE: Final = "null_dev"

_DESELECTED: Final = pytest.StashKey[int]()


def needs_root(item: pytest.Item) -> bool:
    """Whether a test can only run as root."""
    return item.get_closest_marker("root") is not None or any(
        case in item.nodeid for case in NEEDS_ROOT_CASES
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--deselect-needs-root",
        action="store_true",
        help="when not run as root, deselect the tests only root can run, and count them",
    )


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("deselect_needs_root")) and os.geteuid() != 0


def pytest_configure(config: pytest.Config) -> None:
    # Only the device is allowed to be missing; any other entry the fixture cannot make
    # still fails the tests.
    if _active(config):
        os.environ.setdefault("FS_TREE_MAY_LACK", _DEVICE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _active(config):
        return
    deselected = [item for item in items if needs_root(item)]
    config.stash[_DESELECTED] = len(deselected)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not needs_root(item)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    count = terminalreporter.config.stash.get(_DESELECTED, 0)
    if count:
        terminalreporter.write_line(
            f"not root: {count} tests that need root (mounts, device nodes, other uids) were "
            "deselected; CI runs them as root"
        )
