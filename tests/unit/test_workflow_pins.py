"""CI workflows: every action is pinned to a commit, and ci.yml runs the gates it promises.

A tag or branch can be moved to other code after review; a full commit SHA cannot. The
version comment on the same line says which release the SHA is, for humans and for update
tools.
"""

import re
from pathlib import Path
from typing import Final

import pytest

from tests.unit._policy_repo import REPO_ROOT

WORKFLOWS_DIR: Final = REPO_ROOT / ".github" / "workflows"
CI_WORKFLOW: Final = WORKFLOWS_DIR / "ci.yml"

_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<rest>.*)$")
_PINNED = re.compile(
    r"""^(?P<quote>["']?)
    (?P<action>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_./-]+)?)
    @(?P<sha>[0-9a-f]{40})(?P=quote)
    \s+\#\s*v\d+(?:\.\d+){0,2}\S*\s*$""",
    re.VERBOSE,
)
_LOCAL = re.compile(r"""^["']?\./[^@\s]+["']?\s*(?:#.*)?$""")


def unpinned_uses(text: str) -> list[str]:
    """Return every `uses:` line that is neither pinned to a full SHA with a version comment
    nor a local action or workflow of this repository."""
    problems = []
    for line in text.splitlines():
        match = _USES.match(line)
        if match is None:
            continue
        rest = match["rest"].strip()
        if _LOCAL.match(rest) or _PINNED.match(rest):
            continue
        problems.append(line.strip())
    return problems


def workflow_files() -> list[Path]:
    return sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])


@pytest.mark.parametrize(
    "line",
    [
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1",
        "        uses: actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7",
        "    uses: github/codeql-action/upload-sarif@" + "a" * 40 + "  # v3.28.0",
        "    uses: ./.github/workflows/nix.yml",
        "      - uses: ./.github/actions/setup",
    ],
)
def test_pinned_lines_are_accepted(line: str) -> None:
    assert unpinned_uses(line) == []


@pytest.mark.parametrize(
    "line",
    [
        "      - uses: actions/checkout@v4",
        "      - uses: actions/checkout@main",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
        "      - uses: actions/checkout@3d3c42e5 # v7.0.1",
        "      - uses: actions/checkout@3D3C42E5AAC5BA805825DA76410C181273BA90B1 # v7.0.1",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # latest",
        "      - uses: docker://alpine:3.20",
        "      - uses: actions/checkout",
    ],
)
def test_unpinned_lines_are_reported(line: str) -> None:
    assert unpinned_uses(line) == [line.strip()]


def test_every_workflow_pins_every_action() -> None:
    files = workflow_files()
    assert CI_WORKFLOW in files
    uses_lines = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        uses_lines += sum(1 for line in text.splitlines() if _USES.match(line))
        assert unpinned_uses(text) == [], path.name
    assert uses_lines > 0


def test_ci_runs_on_main_and_pull_requests_with_read_only_token() -> None:
    text = CI_WORKFLOW.read_text(encoding="utf-8")
    assert re.search(r"^on:\n  push:\n    branches: \[main\]\n  pull_request:\n", text, re.M)
    assert re.search(r"^permissions:\n  contents: read\n\n", text, re.M)
    assert "write-all" not in text


@pytest.mark.parametrize(
    "command",
    [
        "scripts/audit-attribution.sh --identity-rev",
        'scripts/audit-attribution.sh --push "$PUSH_BEFORE" "$PUSH_AFTER"',
        "scripts/audit-hygiene.sh",
        "uv sync --locked",
        "ruff check .",
        "ruff format --check .",
        "mypy --strict src tests",
        "bandit -c pyproject.toml -r src",
        "run: pytest",
        "scripts/coverage-gate.sh",
        "scripts/mutation-check.sh",
        "mkdocs build --strict",
    ],
)
def test_ci_runs_each_gate(command: str) -> None:
    assert command in CI_WORKFLOW.read_text(encoding="utf-8")


def test_ci_jobs_and_settings() -> None:
    text = CI_WORKFLOW.read_text(encoding="utf-8")
    jobs = re.findall(r"^  ([a-z][a-z-]*):\n    runs-on:", text, re.M)
    assert {"attribution-audit", "code-quality", "docs"} <= set(jobs)
    assert "fetch-depth: 0" in text
    assert "HYPOTHESIS_PROFILE: ci" in text
    assert text.count("persist-credentials: false") == 3
    # Event data reaches the shell through the environment, never by template expansion
    # inside a script, where a crafted branch name could inject commands.
    blocks = re.findall(r"run: \|\n((?:          .*\n|\n)+)", text)
    assert len(blocks) >= 3
    for block in blocks:
        assert "${{" not in block
