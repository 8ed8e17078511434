"""`scripts/coverage-gate.sh` on coverage data measured from a tiny stand-in package.

The stand-in has the layout the gate looks for (the packages `tools/sql/` and `tools/fs/` with a
layer module each, `guardrails/`) and a driver that covers all of it or leaves branches out, run
under `coverage run` with the same coverage settings as the project: branch measurement and
parallel data files under `.cache/coverage/`.
"""

import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit._policy_repo import SCRIPTS_DIR, run

PYPROJECT = """\
[tool.coverage.run]
branch = {branch}
parallel = true
source = ["mcp_server_suite"]
data_file = ".cache/coverage/.coverage"
"""

MODULES = {
    "__init__.py": "",
    "tools/__init__.py": "",
    "tools/sql/__init__.py": """\
        def cap(n: int) -> int:
            if n > 50:
                return 50
            return n
        """,
    "tools/sql/parse.py": """\
        def split(text: str) -> list[str]:
            return text.split(";")
        """,
    "tools/fs/__init__.py": "",
    "tools/fs/read.py": """\
        def relative(path: str) -> bool:
            return not path.startswith("/")
        """,
    "tools/metrics.py": """\
        def load(flag: bool) -> int:
            if flag:
                return 1
            return 0
        """,
    "guardrails/__init__.py": "",
    "guardrails/limit.py": """\
        def check(n: int) -> int:
            if n < 0:
                raise ValueError(n)
            return n
        """,
}

DRIVER = """\
import sys

from mcp_server_suite.guardrails import limit
from mcp_server_suite.tools import sql
from mcp_server_suite.tools.fs import read
from mcp_server_suite.tools.sql import parse as _sql_parse

full = sys.argv[1] == "full"
sql.cap(100)
_sql_parse.split("a;b")
read.relative("a")
limit.check(1)
if full:
    sql.cap(1)
    try:
        limit.check(-1)
    except ValueError:
        pass
"""


def environment(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": "src",
        "PYTHON": sys.executable,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    package = root / "src" / "mcp_server_suite"
    for name, body in MODULES.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(textwrap.dedent(body), encoding="utf-8")
    (root / "drive.py").write_text(DRIVER, encoding="utf-8")
    (root / "pyproject.toml").write_text(PYPROJECT.format(branch="true"), encoding="utf-8")
    (root / ".cache" / "coverage").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    result = run(["git", "init", "-q"], cwd=root, env=environment(tmp_path / "home"))
    assert result.returncode == 0, result.stderr
    return root


def measure(project: Path, mode: str) -> None:
    result = run(
        [sys.executable, "-m", "coverage", "run", "--rcfile=pyproject.toml", "drive.py", mode],
        cwd=project,
        env=environment(project.parent / "home"),
    )
    assert result.returncode == 0, result.stderr
    assert list((project / ".cache" / "coverage").glob(".coverage.*")), "expected parallel data"


def gate(project: Path) -> tuple[int, str]:
    result = run(
        [SCRIPTS_DIR / "coverage-gate.sh"], cwd=project, env=environment(project.parent / "home")
    )
    return result.returncode, result.stdout + result.stderr


def test_full_branch_coverage_passes(project: Path) -> None:
    measure(project, "full")
    status, output = gate(project)
    assert status == 0, output
    assert "6 gated module(s) at 100% branch coverage" in output
    for name in (
        "tools/sql/__init__.py",
        "tools/sql/parse.py",
        "tools/fs/read.py",
        "guardrails/limit.py",
    ):
        assert f"src/mcp_server_suite/{name}" in output
    # Modules outside the gate may be left uncovered.
    assert "metrics.py" not in output
    # The parallel data was combined and kept, so the gate can run again.
    assert gate(project)[0] == 0


def test_missing_branches_fail_and_are_named(project: Path) -> None:
    measure(project, "partial")
    status, output = gate(project)
    assert status == 1
    assert (
        "src/mcp_server_suite/tools/sql/__init__.py: 66.67% branch coverage, 100% required"
        in output
    )
    assert "missing lines: 4\n    missing branches: 2->4" in output
    assert "src/mcp_server_suite/guardrails/limit.py:" in output
    assert "missing lines: 3\n    missing branches: 2->3" in output
    assert "tools/fs/read.py:" not in output


def test_gated_module_never_imported_fails(project: Path) -> None:
    (project / "src/mcp_server_suite/tools/fs/walk.py").write_text("X = 1\n", encoding="utf-8")
    measure(project, "full")
    status, output = gate(project)
    assert status == 1
    assert "src/mcp_server_suite/tools/fs/walk.py: 0.00% branch coverage" in output
    assert "missing lines: 1" in output


def test_missing_required_module_fails(project: Path) -> None:
    (project / "src/mcp_server_suite/tools/fs/read.py").unlink()
    driver = project / "drive.py"
    driver.write_text(
        driver.read_text(encoding="utf-8")
        .replace("from mcp_server_suite.tools.fs import read\n", "")
        .replace('read.relative("a")\n', ""),
        encoding="utf-8",
    )
    measure(project, "full")
    status, output = gate(project)
    assert status == 1
    assert "no coverage data for mcp_server_suite/tools/fs/read.py" in output


def test_no_data_fails(project: Path) -> None:
    status, output = gate(project)
    assert status == 1
    assert "no coverage data" in output
    assert "run pytest first" in output


def test_line_coverage_alone_fails(project: Path) -> None:
    (project / "pyproject.toml").write_text(PYPROJECT.format(branch="false"), encoding="utf-8")
    measure(project, "full")
    status, output = gate(project)
    assert status == 1
    assert "no branch data" in output
