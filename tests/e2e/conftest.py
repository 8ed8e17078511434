"""Fixtures the end-to-end tests of the stdio shell share."""

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A sandbox root holding `hello.txt` and `docs/a.md`, for the file tools' calls."""
    root: Path = tmp_path_factory.mktemp("sandbox")
    (root / "hello.txt").write_text("Hello from the shell's tests.\n", encoding="utf-8")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# a\n", encoding="utf-8")
    return str(root)
