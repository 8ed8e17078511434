"""The release path: `uv build` makes an sdist and a wheel that install and run.

The build and the install run offline, from uv's cache and uv.lock (the suite's own
`uv sync` put everything there), so the test never reaches an index. The release workflow
runs the same checks (scripts/check-dist.py) on the distributions it publishes, with the
dependencies resolved from PyPI.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.harness import REPO_ROOT

CHECK_DIST = REPO_ROOT / "scripts" / "check-dist.py"


def uv() -> str:
    found = shutil.which("uv")
    assert found is not None, "uv is not on PATH: run the suite with scripts/test.sh"
    return found


def load_check_dist() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dist", CHECK_DIST)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv(), "build", "--quiet", "--offline", "--out-dir", str(out), str(REPO_ROOT)],
        check=True,
        timeout=300,
    )
    return out


@pytest.mark.e2e
def test_the_wheel_installs_into_a_fresh_environment_and_serves(dist: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(CHECK_DIST), "--offline", "--tag", "v0.1.0", str(dist)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "ok: mcp_server_suite-0.1.0-py3-none-any.whl and mcp_server_suite-0.1.0.tar.gz "
        "for version 0.1.0",
        "ok: the wheel and the sdist hold the package, its data and its metadata",
        "ok: installed into a fresh virtual environment (lock)",
        "ok: mcp-server-suite 0.1.0 answers a session from the fresh environment "
        "(tools: ['sandbox_fs_read', 'sandbox_fs_list', 'system_metrics'])",
    ]


@pytest.mark.e2e
def test_the_build_is_reproducible(dist: Path, tmp_path: Path) -> None:
    subprocess.run(
        [uv(), "build", "--quiet", "--offline", "--wheel", "--out-dir", str(tmp_path),
         str(REPO_ROOT)],
        check=True,
        timeout=300,
    )  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    assert (tmp_path / wheel.name).read_bytes() == wheel.read_bytes()


def test_a_wrong_tag_is_refused(dist: Path) -> None:
    module = load_check_dist()
    with pytest.raises(module.CheckFailed, match=r"the tag v9\.9\.9 does not name version 0\.1\.0"):
        module.check(dist, "v9.9.9", offline=True)


def test_missing_or_extra_distributions_are_refused(dist: Path, tmp_path: Path) -> None:
    module = load_check_dist()
    with pytest.raises(module.CheckFailed, match="should hold one wheel"):
        module.find_distributions(tmp_path, "0.1.0")
    for path in dist.iterdir():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "mcp_server_suite-0.0.9.tar.gz").write_bytes(b"")
    with pytest.raises(module.CheckFailed, match="should hold one sdist"):
        module.find_distributions(tmp_path, "0.1.0")


@pytest.mark.parametrize(
    "drop",
    [
        "mcp_server_suite/tools/catalog.json",
        "mcp_server_suite/py.typed",
        "mcp_server_suite-0.1.0.dist-info/entry_points.txt",
    ],
)
def test_a_wheel_without_its_data_is_refused(dist: Path, tmp_path: Path, drop: str) -> None:
    module = load_check_dist()
    broken = rewritten(dist, tmp_path, lambda name, data: None if name == drop else data)
    with pytest.raises(module.CheckFailed, match=f"the wheel lacks \\['{drop}'\\]"):
        module.check_wheel(broken, "0.1.0")


def test_a_wheel_with_stray_files_or_wrong_metadata_is_refused(dist: Path, tmp_path: Path) -> None:
    module = load_check_dist()
    (wheel,) = dist.glob("*.whl")
    stray = tmp_path / "stray" / wheel.name
    stray.parent.mkdir()
    shutil.copy(wheel, stray)
    with zipfile.ZipFile(stray, "a") as archive:
        archive.writestr("tests/test_x.py", "")
    with pytest.raises(module.CheckFailed, match="outside the package"):
        module.check_wheel(stray, "0.1.0")

    def relicensed(name: str, data: bytes) -> bytes:
        if name.endswith("/METADATA"):
            return data.replace(b"License-Expression: MIT", b"License-Expression: GPL-3.0")
        return data

    with pytest.raises(module.CheckFailed, match="metadata differs"):
        module.check_wheel(rewritten(dist, tmp_path, relicensed), "0.1.0")


def rewritten(dist: Path, tmp_path: Path, change: Callable[[str, bytes], bytes | None]) -> Path:
    """A copy of the wheel with each member passed through `change` (None drops it)."""
    (wheel,) = dist.glob("*.whl")
    target = tmp_path / "rewritten" / wheel.name
    target.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as out:
        for item in source.infolist():
            data = change(item.filename, source.read(item))
            if data is not None:
                out.writestr(item, data)
    return target


def test_an_sdist_without_its_files_is_refused(tmp_path: Path) -> None:
    module = load_check_dist()
    sdist = tmp_path / "mcp_server_suite-0.1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        info = tarfile.TarInfo("mcp_server_suite-0.1.0/pyproject.toml")
        archive.addfile(info)
    with pytest.raises(module.CheckFailed, match="the sdist lacks"):
        module.check_sdist(sdist, "0.1.0")
