"""`scripts/mutation-check.sh` on a tiny stand-in project.

The stand-in package has one defended function with a test, and one function no test looks
at. A mutation of the first is killed, a mutation of the second survives, and a mutation whose
text is missing cannot be applied; the script must pass only when every mutation is killed,
and must never write to the project it checks.
"""

import hashlib
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit._policy_repo import REPO_ROOT, SCRIPTS_DIR, run

CALC = """\
LIMIT = 50


def clamp(n: int) -> int:
    if n > LIMIT:
        return LIMIT
    return n


def untested() -> str:
    return "a"


def spin() -> None:
    return None
"""

TEST_CALC = """\
from fakepkg.calc import clamp, spin


def test_clamp() -> None:
    assert clamp(100) == 50
    assert clamp(3) == 3


def test_spin() -> None:
    spin()
"""

MUTATIONS = {
    "killed": ("if n > LIMIT:", "if False:"),
    "survivor": ('return "a"', 'return "b"'),
    "missing": ("if n >= LIMIT:", "if False:"),
    "twice": ("return", "yield"),
    "hang": ("    return None", "    while True:\n        pass"),
}


def table_text(
    names: list[str], *, package: str = "fakepkg", tests: str = "tests/test_calc.py"
) -> str:
    lines = [f'package = "{package}"', 'source-root = "src"']
    for name in names:
        search, replace = MUTATIONS[name]
        lines += [
            "",
            "[[mutation]]",
            f'id = "{name}"',
            f'description = "The {name} mutation."',
            'file = "src/fakepkg/calc.py"',
            f"search = '''{search}'''",
            f"replace = '''{replace}'''",
            f'tests = ["{tests}"]',
        ]
    return "\n".join(lines) + "\n"


def environment(tmp_path: Path) -> dict[str, str]:
    scratch = tmp_path / "scratch-tmp"
    scratch.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "TMPDIR": str(scratch),
        "PYTHON": sys.executable,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    files = {
        "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        "src/fakepkg/__init__.py": "",
        "src/fakepkg/calc.py": CALC,
        "tests/test_calc.py": TEST_CALC,
        ".gitignore": "ignored/\n",
        "ignored/notes.txt": "ignored\n",
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(body), encoding="utf-8")
    env = environment(tmp_path)
    assert run(["git", "init", "-q"], cwd=root, env=env).returncode == 0
    # Tracked and untracked files are both part of the copy; the test module stays untracked.
    assert run(["git", "add", "src", "pyproject.toml"], cwd=root, env=env).returncode == 0
    return root


def mutation_check(
    project: Path,
    names: list[str],
    *extra: str,
    package: str = "fakepkg",
    tests: str = "tests/test_calc.py",
) -> tuple[int, str]:
    table = project.parent / "mutations.toml"
    table.write_text(table_text(names, package=package, tests=tests), encoding="utf-8")
    result = run(
        [SCRIPTS_DIR / "mutation-check.sh", "--table", str(table), *extra],
        cwd=project,
        env=environment(project.parent),
    )
    return result.returncode, result.stdout + result.stderr


def fingerprint(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_killed_mutation_passes(project: Path) -> None:
    status, output = mutation_check(project, ["killed"])
    assert status == 0, output
    assert "confirm: 1 failing test(s) pass on the unmutated tree" in output
    assert "KILLED   killed: The killed mutation." in output
    assert "1 killed, 0 survived, 0 errors" in output


def test_surviving_or_inapplicable_mutations_fail(project: Path) -> None:
    before = fingerprint(project)
    status, output = mutation_check(project, ["killed", "survivor", "missing", "twice"])
    assert status == 1, output
    assert "KILLED   killed" in output
    assert "SURVIVED survivor: The survivor mutation. (the tests passed" in output
    assert "ERROR    missing: The missing mutation. (search text found 0 times" in output
    assert "ERROR    twice: The twice mutation. (search text found 4 times" in output
    assert "1 killed, 1 survived, 2 errors" in output
    # The project is byte for byte as it was, and nothing was added to it.
    assert fingerprint(project) == before


@pytest.mark.parametrize("name", ["survivor", "missing"])
def test_one_bad_mutation_is_enough_to_fail(project: Path, name: str) -> None:
    status, output = mutation_check(project, [name])
    assert status == 1, output


def test_hanging_mutation_is_killed_by_the_time_limit(project: Path) -> None:
    status, output = mutation_check(project, ["hang"], "--timeout", "6")
    assert status == 0, output
    # A kill by the time limit names no failing test: its whole selection must pass unmutated.
    assert "baseline tests/test_calc.py: passes" in output
    assert "KILLED   hang: The hang mutation. (timed out after 6 s" in output


def test_kill_by_a_test_failing_without_the_mutation_is_an_error(project: Path) -> None:
    test_module = project / "tests" / "test_calc.py"
    test_module.write_text(TEST_CALC.replace("== 3", "== 4"), encoding="utf-8")
    status, output = mutation_check(project, ["killed"])
    assert status == 1
    assert "do not all pass on the unmutated tree" in output
    assert (
        "ERROR    killed: The killed mutation. (its failing tests fail on the unmutated" in output
    )
    assert "0 killed, 0 survived, 1 errors" in output


def test_kill_that_a_rerun_cannot_settle_falls_back_to_the_selection(project: Path) -> None:
    # The failing test's id changes from run to run, so the confirming run cannot name it: the
    # kill is then confirmed by the whole selection passing on the unmutated tree.
    test_module = project / "tests" / "test_calc.py"
    test_module.write_text(
        "import os\n\nimport pytest\n\n"
        + TEST_CALC.replace(
            "def test_clamp() -> None:",
            "@pytest.mark.parametrize('run', [os.getpid()])\ndef test_clamp(run: int) -> None:",
        ),
        encoding="utf-8",
    )
    status, output = mutation_check(project, ["killed"])
    assert status == 0, output
    assert "do not all pass on the unmutated tree" in output
    assert "baseline tests/test_calc.py: passes" in output
    assert "1 killed, 0 survived, 0 errors" in output


def test_package_imported_from_elsewhere_is_refused(project: Path) -> None:
    # The standard library's json is importable, but not from the scratch copy: a mutation
    # run against it would test the wrong code.
    status, output = mutation_check(project, ["killed"], package="json")
    assert status == 1
    assert "json was imported from" in output
    assert "not from the scratch copy" in output


def test_check_mode_reports_applicability_without_running_tests(project: Path) -> None:
    status, output = mutation_check(project, ["killed", "missing"], "--check")
    assert status == 1
    assert "applicable killed" in output
    assert "NOT APPLICABLE missing: search text found 0 times in src/fakepkg/calc.py" in output
    assert "baseline" not in output
    assert mutation_check(project, ["killed"], "--check")[0] == 0


def test_a_mutation_may_name_the_one_test_that_catches_it(project: Path) -> None:
    status, output = mutation_check(project, ["killed"], tests="tests/test_calc.py::test_clamp")
    assert status == 0, output
    assert (
        "KILLED   killed: The killed mutation. (caught by tests/test_calc.py::test_clamp" in output
    )
    # A test that no longer exists under its name is caught by --check, as a stale search is.
    status, output = mutation_check(
        project, ["killed"], "--check", tests="tests/test_calc.py::test_renamed"
    )
    assert status == 1
    assert "NOT APPLICABLE killed: missing tests ['tests/test_calc.py::test_renamed']" in output


def test_ids_select_mutations(project: Path) -> None:
    status, output = mutation_check(project, ["killed", "survivor"], "killed")
    assert status == 0, output
    assert "survivor" not in output
    assert mutation_check(project, ["killed"], "nonexistent")[0] == 2


def test_malformed_table_is_a_usage_error(project: Path) -> None:
    table = project.parent / "broken.toml"
    table.write_text('package = "fakepkg"\n[[mutation]]\nid = "x"\n', encoding="utf-8")
    result = run(
        [SCRIPTS_DIR / "mutation-check.sh", "--table", str(table)],
        cwd=project,
        env=environment(project.parent),
    )
    assert result.returncode == 2
    assert "missing" in result.stderr


def test_project_table_names_the_required_defences() -> None:
    table = SCRIPTS_DIR / "mutations.toml"
    result = run(
        [
            sys.executable,
            SCRIPTS_DIR / "_mutate.py",
            "--root",
            REPO_ROOT,
            "--list",
            "--table",
            table,
        ],
        cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    ids = {line.split("\t")[0] for line in result.stdout.splitlines() if line[:1] != "\t"}
    # The six required defences, at least; more may be added.
    assert ids >= {
        "fs-walk-follows-symlinks",
        "sql-limit-not-rewritten",
        "sql-second-statement-allowed",
        "jsonrpc-duplicate-keys-accepted",
        "framing-no-ceiling",
        "sanitizer-skipped",
    }


def test_every_mutation_of_the_project_table_still_applies() -> None:
    # A refactor that moves a defence must move its search text too; the full check runs in
    # CI, this keeps every test run from drifting in the meantime.
    result = run(
        [
            sys.executable,
            SCRIPTS_DIR / "_mutate.py",
            "--root",
            REPO_ROOT,
            "--table",
            SCRIPTS_DIR / "mutations.toml",
            "--python",
            sys.executable,
            "--check",
        ],
        cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "applicable audit-required-not-enforced" in result.stdout + result.stderr
