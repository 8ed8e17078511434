"""Mutation check: disable one defence at a time and prove that its tests notice.

Called by `scripts/mutation-check.sh`; uses the standard library only.

Rule 1: the working tree is never written to. Each run copies the tracked files, and the
untracked files that are not ignored, into a scratch directory under the system temporary
directory, applies one mutation to the copy, and removes the copy afterwards.
Rule 2: a mutation whose search text does not occur exactly once in its file is an error, so
a table that has gone stale can never pass quietly.
Rule 3: a kill counts only when it is confirmed on an unmutated copy. Each run records the
tests that failed; afterwards the tests that failed under any mutation run together once on an
unmutated copy, and a mutation is confirmed KILLED when a test that failed under it passes
there. A kill by the time limit, or one whose tests that run could not settle, is confirmed
by its whole test selection passing on an unmutated copy within the limit instead. An
unconfirmed kill is an ERROR: a test that fails without the mutation proves nothing with it.
(Confirming the failing tests alone, rather than first running every selection unmutated,
costs one short run instead of the selections a second time.)
Rule 4: the package under test must be imported from the scratch copy. Each run imports it
before pytest starts and stops with an error if it came from anywhere else, such as an
installed or editable copy of the real tree.
Rule 5: a mutation is KILLED when pytest reports failing tests (exit status 1) or the run
overruns its time limit, SURVIVED when the tests pass, and an ERROR otherwise (collection
errors, no tests collected, a crash). The check passes only when every mutation is KILLED.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["Mutation", "Table", "load_table", "main"]

# Pytest's exit status for "tests ran and some failed".
_PYTEST_TESTS_FAILED: Final = 1
# Exit status of the import guard below; outside the range pytest itself uses.
_GUARD_FAILED: Final = 90
# A mutation that turns a bounded loop into an endless one is caught by this limit. Ten
# minutes is far above the slowest test module and still ends a hung run in CI.
DEFAULT_TIMEOUT_S: Final = 600.0
# Two workers match the two cores of the project's CI machines.
DEFAULT_JOBS: Final = 2
_OUTPUT_TAIL_LINES: Final = 30

# Runs in the child interpreter: import the package, prove where it came from, then hand the
# rest of argv to pytest in the same process so that nothing can re-import it from elsewhere.
# Any failure before pytest starts exits with _GUARD_FAILED, never with pytest's own statuses,
# so a copy that cannot even be imported is an error rather than a killed mutation.
_GUARD: Final = f"""
import importlib, pathlib, sys
package, root = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
try:
    origin = pathlib.Path(importlib.import_module(package).__file__).resolve()
except BaseException as exc:
    print(f"cannot import {{package}} from the scratch copy: {{exc!r}}", file=sys.stderr)
    raise SystemExit({_GUARD_FAILED})
if not origin.is_relative_to(root):
    print(f"{{package}} was imported from {{origin}}, not from the scratch copy {{root}}",
          file=sys.stderr)
    raise SystemExit({_GUARD_FAILED})
import pytest
failed = []
class RecordFailures:
    def pytest_runtest_logreport(self, report):
        if report.failed and report.nodeid not in failed:
            failed.append(report.nodeid)
try:
    status = pytest.main(sys.argv[4:], plugins=[RecordFailures()])
finally:
    pathlib.Path(sys.argv[3]).write_text("".join(f"{{i}}\\n" for i in failed), encoding="utf-8")
raise SystemExit(status)
"""

# Environment variables that would let a child write into the real tree, or measure or
# import the real tree instead of the copy.
_SCRUBBED_PREFIXES: Final = ("COVERAGE_", "COV_CORE_")
_SCRUBBED_NAMES: Final = ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONSTARTUP", "PYTEST_ADDOPTS")

_MUTATION_KEYS: Final = frozenset(
    {"id", "description", "file", "search", "replace", "tests", "pytest-args"}
)
_TABLE_KEYS: Final = frozenset({"package", "source-root", "mutation"})


class TableError(Exception):
    """The mutation table is malformed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Mutation:
    """One defence to disable: replace `search`, which must occur once in `file`."""

    id: str
    description: str
    file: str
    search: str
    replace: str
    tests: tuple[str, ...]
    pytest_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Table:
    """The package whose import is guarded, where it lives, and the mutations."""

    package: str
    source_root: str
    mutations: tuple[Mutation, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one pytest run showed."""

    verdict: str
    detail: str
    seconds: float
    output: str
    # The node ids of the tests that failed, in the order they failed.
    failed: tuple[str, ...] = ()


def _relative(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TableError(f"{where}: expected a non-empty string")
    path = Path(value)
    if path.is_absolute() or ".." in path.parts:
        raise TableError(f"{where}: {value!r} must be relative to the repository, without '..'")
    return value


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TableError(f"{where}: expected a list of strings")
    return tuple(value)


def load_table(path: Path) -> Table:
    """Read and validate a mutation table.

    Args:
        path: A TOML file with `package`, optional `source-root` and `[[mutation]]` entries.

    Returns:
        The validated table.

    Raises:
        TableError: The file is not valid TOML or breaks the table's schema.
        OSError: The file cannot be read.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TableError(f"{path}: {exc}") from None
    unknown = set(data) - _TABLE_KEYS
    if unknown:
        raise TableError(f"{path}: unknown keys {sorted(unknown)}")
    package = data.get("package")
    if not isinstance(package, str) or not package.isidentifier():
        raise TableError(f"{path}: 'package' must name an importable package")
    source_root = _relative(data.get("source-root", "src"), f"{path}: source-root")
    entries = data.get("mutation")
    if not isinstance(entries, list) or not entries:
        raise TableError(f"{path}: no [[mutation]] entries")
    mutations: list[Mutation] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, start=1):
        where = f"{path}: mutation {number}"
        if not isinstance(entry, dict):
            raise TableError(f"{where}: expected a table")
        unknown = set(entry) - _MUTATION_KEYS
        missing = _MUTATION_KEYS - {"pytest-args"} - set(entry)
        if unknown or missing:
            raise TableError(f"{where}: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
        ident, description = entry["id"], entry["description"]
        search, replace = entry["search"], entry["replace"]
        if not isinstance(ident, str) or not ident or ident in seen:
            raise TableError(f"{where}: 'id' must be a unique non-empty string")
        seen.add(ident)
        if not isinstance(description, str) or not description:
            raise TableError(f"{where}: 'description' must be a non-empty string")
        if not isinstance(search, str) or not search:
            raise TableError(f"{where}: 'search' must be a non-empty string")
        if not isinstance(replace, str) or replace == search:
            raise TableError(f"{where}: 'replace' must be a string that differs from 'search'")
        tests = tuple(
            _relative(test, f"{where}: tests") for test in _strings(entry["tests"], where)
        )
        if not tests:
            raise TableError(f"{where}: 'tests' names no test module")
        mutations.append(
            Mutation(
                id=ident,
                description=description,
                file=_relative(entry["file"], f"{where}: file"),
                search=search,
                replace=replace,
                tests=tests,
                pytest_args=_strings(entry.get("pytest-args", []), where),
            )
        )
    return Table(package=package, source_root=source_root, mutations=tuple(mutations))


def _tree_files(root: Path) -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8", "surrogateescape")
    names = {name for name in listing.split("\0") if name}
    # A tracked file deleted from the working tree is listed but has nothing to copy.
    return sorted(name for name in names if (root / name).is_symlink() or (root / name).exists())


def _copy_tree(root: Path, files: Sequence[str], destination: Path) -> None:
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target, follow_symlinks=False)


def _apply(mutation: Mutation, tree: Path) -> str | None:
    """Apply the mutation to the copy; return why it cannot be applied, or None."""
    target = tree / mutation.file
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{mutation.file} does not exist"
    found = text.count(mutation.search)
    if found != 1:
        return f"search text found {found} times in {mutation.file}; it must occur exactly once"
    target.write_text(text.replace(mutation.search, mutation.replace), encoding="utf-8")
    return None


def _child_environment(tree: Path, table: Table, scratch_tmp: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _SCRUBBED_NAMES and not name.startswith(_SCRUBBED_PREFIXES)
    }
    env["PYTHONPATH"] = str(tree / table.source_root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(scratch_tmp / "hypothesis")
    env["TMPDIR"] = str(scratch_tmp)
    return env


def _run_tests(
    python: str,
    table: Table,
    tree: Path,
    *,
    tests: Sequence[str],
    extra: Sequence[str],
    timeout: float,
    first_failure: bool = True,
) -> Outcome:
    scratch_tmp = tree.parent / "tmp"
    scratch_tmp.mkdir(exist_ok=True)
    failures_file = tree.parent / "failed-tests"
    command = [
        python,
        "-c",
        _GUARD,
        table.package,
        str(tree),
        str(failures_file),
        *tests,
        *(["-x"] if first_failure else []),
        "-q",
        "--no-cov",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    started = time.monotonic()
    # A session of its own lets a timeout end the whole process group, including servers the
    # tests started, which would otherwise keep the output pipe open.
    with subprocess.Popen(
        command,
        cwd=tree,
        env=_child_environment(tree, table, scratch_tmp),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    ) as process:
        try:
            raw, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raw, _ = process.communicate()
            output = raw.decode("utf-8", "replace")
            return Outcome(
                "KILLED", f"timed out after {timeout:g} s", time.monotonic() - started, output
            )
    seconds = time.monotonic() - started
    output = raw.decode("utf-8", "replace")
    try:
        failed = tuple(failures_file.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        failed = ()
    status = process.returncode
    if status == 0:
        return Outcome("SURVIVED", "the tests passed", seconds, output)
    if status == _PYTEST_TESTS_FAILED:
        detail = f"caught by {failed[0]}" if failed else "the tests failed"
        return Outcome("KILLED", detail, seconds, output, failed)
    if status == _GUARD_FAILED:
        return Outcome("ERROR", "the package was not imported from the copy", seconds, output)
    return Outcome("ERROR", f"pytest exited with status {status}", seconds, output)


def _tail(output: str) -> str:
    lines = output.rstrip().splitlines()[-_OUTPUT_TAIL_LINES:]
    return "\n".join(f"    | {line}" for line in lines)


class _Runner:
    def __init__(
        self, root: Path, table: Table, python: str, timeout: float, scratch: Path
    ) -> None:
        self.root = root
        self.table = table
        self.python = python
        self.timeout = timeout
        self.scratch = scratch
        self.base = scratch / "base"
        _copy_tree(root, _tree_files(root), self.base)

    def _fresh_copy(self, name: str) -> Path:
        tree = self.scratch / name / "tree"
        shutil.copytree(self.base, tree, symlinks=True)
        return tree

    def unmutated(
        self, name: str, tests: Sequence[str], extra: Sequence[str], *, first_failure: bool
    ) -> Outcome:
        tree = self._fresh_copy(name)
        try:
            return _run_tests(
                self.python,
                self.table,
                tree,
                tests=tests,
                extra=extra,
                timeout=self.timeout,
                first_failure=first_failure,
            )
        finally:
            shutil.rmtree(tree.parent, ignore_errors=True)

    def mutant(self, index: int, mutation: Mutation) -> Outcome:
        tree = self._fresh_copy(f"m{index}")
        try:
            problem = _apply(mutation, tree)
            if problem is not None:
                return Outcome("ERROR", problem, 0.0, "")
            return _run_tests(
                self.python,
                self.table,
                tree,
                tests=mutation.tests,
                extra=mutation.pytest_args,
                timeout=self.timeout,
            )
        finally:
            shutil.rmtree(tree.parent, ignore_errors=True)


def _report(label: str, outcome: Outcome, *, show_output: bool) -> None:
    print(f"mutation-check: {label} ({outcome.detail}, {outcome.seconds:.1f} s)", flush=True)
    if show_output and outcome.output:
        print(_tail(outcome.output), flush=True)


def _test_exists(root: Path, test: str) -> bool:
    # A test module, or one test in it by its node id (`path::Class::name[parameters]`):
    # the module must exist and define each name the id goes through.
    # Parameters may hold "::" themselves, so the id is split before them.
    path, *names = test.partition("[")[0].split("::")
    try:
        text = (root / path).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return False
    return all(
        re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", text, re.M)
        for name in names
    )


def _check_only(root: Path, table: Table) -> int:
    failures = 0
    for mutation in table.mutations:
        try:
            text = (root / mutation.file).read_text(encoding="utf-8")
        except FileNotFoundError:
            found = -1
        else:
            found = text.count(mutation.search)
        missing_tests = [test for test in mutation.tests if not _test_exists(root, test)]
        if found == 1 and not missing_tests:
            print(f"mutation-check: applicable {mutation.id}")
            continue
        failures += 1
        reasons = []
        if found < 0:
            reasons.append(f"{mutation.file} does not exist")
        elif found != 1:
            reasons.append(f"search text found {found} times in {mutation.file}")
        if missing_tests:
            reasons.append(f"missing tests {missing_tests}")
        reason = "; ".join(reasons)
        print(f"mutation-check: NOT APPLICABLE {mutation.id}: {reason}")
    return 1 if failures else 0


def _confirm(
    runner: _Runner,
    pool: concurrent.futures.Executor,
    mutations: Sequence[Mutation],
    outcomes: list[Outcome],
) -> None:
    """Rule 3: turn every kill that the unmutated tree does not confirm into an ERROR."""
    killed_by_tests = [
        i for i, outcome in enumerate(outcomes) if outcome.verdict == "KILLED" and outcome.failed
    ]
    failed = sorted({test for i in killed_by_tests for test in outcomes[i].failed})
    # The tests that failed under any mutation, once, without -x: each must pass unmutated.
    still_failing: frozenset[str] = frozenset()
    unsettled: list[int] = [
        i
        for i, outcome in enumerate(outcomes)
        if outcome.verdict == "KILLED" and not outcome.failed
    ]
    if failed:
        check = runner.unmutated("confirm", failed, (), first_failure=False)
        passed = check.verdict == "SURVIVED"
        _report(
            f"confirm: {len(failed)} failing test(s) "
            + ("pass on the unmutated tree" if passed else "do not all pass on the unmutated tree"),
            check,
            show_output=not passed,
        )
        if check.verdict == "KILLED" and check.failed:
            still_failing = frozenset(check.failed)
        elif not passed:
            # The run itself did not settle (a time limit, a test id it could not find): fall
            # back to each selection's own run.
            unsettled += killed_by_tests
            killed_by_tests = []
    for i in killed_by_tests:
        if not set(outcomes[i].failed) - still_failing:
            outcomes[i] = dataclasses.replace(
                outcomes[i],
                verdict="ERROR",
                detail="its failing tests fail on the unmutated tree too",
            )
    selections = sorted({(mutations[i].tests, mutations[i].pytest_args) for i in unsettled})

    def run_selection(item: tuple[int, tuple[tuple[str, ...], tuple[str, ...]]]) -> Outcome:
        index, (tests, extra) = item
        return runner.unmutated(f"b{index}", tests, extra, first_failure=True)

    verdicts = dict(zip(selections, pool.map(run_selection, enumerate(selections)), strict=True))
    for (tests, extra), check in verdicts.items():
        passed = check.verdict == "SURVIVED"
        label = f"baseline {' '.join((*tests, *extra))}: " + (
            "passes" if passed else "FAILS on the unmutated tree"
        )
        _report(label, check, show_output=not passed)
    for i in unsettled:
        if verdicts[(mutations[i].tests, mutations[i].pytest_args)].verdict != "SURVIVED":
            outcomes[i] = dataclasses.replace(
                outcomes[i], verdict="ERROR", detail="its tests fail on the unmutated tree too"
            )


def _run(root: Path, table: Table, python: str, jobs: int, timeout: float) -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as scratch_name:
        runner = _Runner(root, table, python, timeout, Path(scratch_name))

        def run_mutant(item: tuple[int, Mutation]) -> Outcome:
            return runner.mutant(*item)

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(run_mutant, enumerate(table.mutations)))
            _confirm(runner, pool, table.mutations, outcomes)
    counts = {"KILLED": 0, "SURVIVED": 0, "ERROR": 0}
    for mutation, outcome in zip(table.mutations, outcomes, strict=True):
        counts[outcome.verdict] += 1
        label = f"{outcome.verdict:<8} {mutation.id}: {mutation.description}"
        _report(label, outcome, show_output=outcome.verdict == "ERROR")
    print(
        f"mutation-check: {counts['KILLED']} killed, {counts['SURVIVED']} survived, "
        f"{counts['ERROR']} errors in {time.monotonic() - started:.1f} s"
    )
    return 0 if counts["KILLED"] == len(table.mutations) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, load the table and run it.

    Args:
        argv: Command-line arguments without the program name.

    Returns:
        0 when every mutation is killed (or, with --check, applicable), 1 when one is not,
        2 for a usage or table error.
    """
    parser = argparse.ArgumentParser(
        prog="mutation-check.sh",
        description="Disable one defence at a time and prove that its tests notice.",
    )
    parser.add_argument("--root", type=Path, required=True, help="repository to copy")
    parser.add_argument("--table", type=Path, required=True, help="mutation table (TOML)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pytest")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="parallel pytest runs")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per run")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument(
        "--check", action="store_true", help="only check that every mutation applies"
    )
    parser.add_argument("ids", nargs="*", help="run only these mutations")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs and --timeout must be positive")
    try:
        table = load_table(args.table)
    except (TableError, OSError) as exc:
        print(f"mutation-check: {exc}", file=sys.stderr)
        return 2
    if args.ids:
        unknown = set(args.ids) - {m.id for m in table.mutations}
        if unknown:
            print(f"mutation-check: unknown mutation ids {sorted(unknown)}", file=sys.stderr)
            return 2
        table = dataclasses.replace(
            table, mutations=tuple(m for m in table.mutations if m.id in args.ids)
        )
    if args.list:
        for mutation in table.mutations:
            print(f"{mutation.id}\t{mutation.file}\t{' '.join(mutation.tests)}")
            print(f"\t{mutation.description}")
        return 0
    root = args.root.resolve()
    if args.check:
        return _check_only(root, table)
    return _run(root, table, args.python, args.jobs, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
