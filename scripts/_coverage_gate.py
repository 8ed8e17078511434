"""Coverage gate: the modules that enforce the security policy need 100% branch coverage.

Called by `scripts/coverage-gate.sh` after pytest has written its coverage data.

Gated modules, inside the `mcp_server_suite` package: every module of the SQL tool's package
(`tools/sql/*.py`), every module of the file tools' package (`tools/fs/*.py`), every module of
`guardrails/`, every module of `audit/` (the trail that answers the threat model's
Repudiation row), the protocol core without I/O (framing, the JSON-RPC guard, the dispatcher
and both eras, the output bound) and the error taxonomy. Each of `tools/sql/__init__.py`,
`tools/fs/read.py` and `guardrails/` must be present in the data: a gate that matches nothing
proves nothing.

Every gated file with a missing line or branch is printed with its missing lines and its
missing branches (`12->14`, or `12->exit` for a branch that leaves the function).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import coverage
from coverage.exceptions import CoverageException

__all__ = ["GATED", "REQUIRED", "main"]

PACKAGE: Final = "mcp_server_suite"
GATED: Final = (
    "tools/sql/*.py",
    "tools/fs/*.py",
    "guardrails/*.py",
    "audit/*.py",
    "core/framing.py",
    "core/jsonrpc.py",
    "core/actions.py",
    "core/versions.py",
    "core/methods.py",
    "core/legacy.py",
    "core/modern.py",
    "core/server.py",
    "core/backpressure.py",
    "schemas/errors.py",
    "schemas/problems.py",
    "schemas/echo.py",
    "schemas/arguments.py",
)
REQUIRED: Final = ("tools/sql/__init__.py", "tools/fs/read.py", "guardrails/*.py")


def _package_path(filename: str) -> str | None:
    parts = Path(filename).as_posix().split("/")
    if PACKAGE not in parts:
        return None
    index = len(parts) - 1 - parts[::-1].index(PACKAGE)
    return "/".join(parts[index + 1 :])


def _ranges(numbers: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for number in sorted(numbers):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _branches(pairs: Iterable[Sequence[int]]) -> str:
    return ", ".join(f"{a}->{b if b > 0 else 'exit'}" for a, b in pairs)


def _load(data_file: Path, rcfile: str | bool) -> coverage.Coverage:
    cov = coverage.Coverage(data_file=str(data_file), config_file=rcfile)
    # pytest-cov combines parallel data when the session ends; data written by subprocesses
    # that it did not combine is appended here, so the gate judges the whole test run.
    parallel = sorted(data_file.parent.glob(data_file.name + ".*"))
    cov.load()
    if parallel:
        cov.combine([str(path) for path in parallel], keep=True)
        cov.save()
    return cov


class GateError(Exception):
    """The coverage data cannot be judged."""


def _file_reports(data_file: Path, rcfile: str | bool) -> dict[str, Any]:
    """Return coverage's JSON report, by file, for the data of the last test run.

    Raises:
        GateError: There is no data, it has no branch data, or it cannot be read.
    """
    try:
        cov = _load(data_file, rcfile)
    except CoverageException as exc:
        raise GateError(f"cannot read coverage data from {data_file}: {exc}") from None
    data = cov.get_data()
    if not data.measured_files():
        raise GateError(f"no coverage data in {data_file}; run pytest first")
    if not data.has_arcs():
        raise GateError(f"{data_file} holds no branch data; run pytest with --cov-branch")
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "coverage.json"
        cov.json_report(outfile=str(report))
        files: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))["files"]
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """Check the gated modules' branch coverage.

    Args:
        argv: Command-line arguments without the program name.

    Returns:
        0 when every gated module is fully covered, 1 otherwise.
    """
    parser = argparse.ArgumentParser(
        prog="coverage-gate.sh",
        description="Require 100% branch coverage of the SQL and file tools and guardrails/.",
    )
    parser.add_argument("--data-file", type=Path, help="coverage data (default: from config)")
    parser.add_argument("--rcfile", default="pyproject.toml", help="coverage configuration")
    args = parser.parse_args(argv)

    rcfile: str | bool = args.rcfile if Path(args.rcfile).exists() else False
    config = coverage.Coverage(config_file=rcfile).config
    data_file = args.data_file or Path(config.data_file)
    try:
        files = _file_reports(data_file, rcfile)
    except GateError as exc:
        print(f"coverage-gate: {exc}")
        return 1

    gated = {
        name: inner
        for name in files
        if (inner := _package_path(name)) is not None
        and any(fnmatch.fnmatchcase(inner, pattern) for pattern in GATED)
    }
    failed = False
    for required in REQUIRED:
        if not any(fnmatch.fnmatchcase(inner, required) for inner in gated.values()):
            print(f"coverage-gate: no coverage data for {PACKAGE}/{required}")
            failed = True
    for name in sorted(gated):
        record = files[name]
        lines = record.get("missing_lines", [])
        branches = record.get("missing_branches", [])
        if not lines and not branches:
            continue
        percent = record["summary"]["percent_covered"]
        failed = True
        print(f"coverage-gate: {name}: {percent:.2f}% branch coverage, 100% required")
        if lines:
            print(f"    missing lines: {_ranges(lines)}")
        if branches:
            print(f"    missing branches: {_branches(branches)}")
    if failed:
        return 1
    print(f"coverage-gate: {len(gated)} gated module(s) at 100% branch coverage")
    for name in sorted(gated):
        print(f"    {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
