"""The verdicts of `scripts/check-conformance.sh`, on results written as the suite writes them.

The suite writes one `checks.json` per scenario into a directory named for the scenario and the
time; `classify` must call a success a pass, a listed server check's failure and any listed
bridge check not applicable, anything else that did not succeed a failure, and report a listed
check that did not fail (server) or never ran (bridge), so the list cannot go stale. The list
itself must give a reason for every entry.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit._policy_repo import REPO_ROOT, SCRIPTS_DIR

# The script and its Node.js programs are the interoperability tooling: a build of the package
# alone (the Nix check phase) has neither, and deselects this marker.
pytestmark = pytest.mark.interop

LISTED = REPO_ROOT / "tests" / "clients" / "conformance-not-applicable.json"


@pytest.fixture(scope="module")
def conformance() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_conformance", SCRIPTS_DIR / "_conformance.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the module by name while the class is made.
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setitem(sys.modules, spec.name, module)
    try:
        spec.loader.exec_module(module)
    finally:
        monkeypatch.undo()
    return module


def write_scenario(output: Path, scenario: str, checks: list[dict[str, Any]]) -> None:
    folder = output / f"server-{scenario}-2026-12-01T21-10-51-716Z"
    folder.mkdir(parents=True)
    (folder / "checks.json").write_text(json.dumps(checks), "utf-8")


def check(check_id: str, status: str, message: str | None = None) -> dict[str, Any]:
    return {"id": check_id, "status": status, "errorMessage": message}


def test_each_check_gets_its_verdict(conformance: ModuleType, tmp_path: Path) -> None:
    write_scenario(
        tmp_path,
        "tools-list",
        [check("tools-list", "SUCCESS"), check("wire-schema-valid", "SUCCESS")],
    )
    write_scenario(
        tmp_path,
        "prompts-list",
        [
            check("prompts-list", "FAILURE", "Method\nnot found"),
            check("wire-schema-valid", "FAILURE"),
        ],
    )
    write_scenario(tmp_path, "caching", [check("hints", "WARNING", "no hints"), check("x", "INFO")])
    write_scenario(tmp_path, "dns", [check("host", "SUCCESS"), check("origin", "FAILURE")])
    listed = conformance.NotApplicable(
        server={"prompts-list:prompts-list": "needs prompts"},
        bridge={"dns:host": "HTTP layer", "dns:origin": "HTTP layer"},
    )
    rows, stale = conformance.classify(tmp_path, listed)
    verdicts = {(row.scenario, row.check): (row.verdict, row.note) for row in rows}
    assert verdicts == {
        ("tools-list", "tools-list"): ("pass", ""),
        ("tools-list", "wire-schema-valid"): ("pass", ""),
        ("prompts-list", "prompts-list"): ("n/a: server", "needs prompts"),
        # Listing a scenario's own check does not excuse its wire check.
        ("prompts-list", "wire-schema-valid"): ("FAIL", ""),
        # A SHOULD-level warning fails unless it is listed.
        ("caching", "hints"): ("FAIL", "no hints"),
        ("caching", "x"): ("not scored", ""),
        # What the bridge decides says nothing about the server, pass or fail.
        ("dns", "host"): ("n/a: bridge", "HTTP layer"),
        ("dns", "origin"): ("n/a: bridge", "HTTP layer"),
    }
    assert stale == []


def test_a_listed_check_that_passes_or_never_runs_is_stale(
    conformance: ModuleType, tmp_path: Path
) -> None:
    write_scenario(tmp_path, "ping", [check("ping", "SUCCESS")])
    listed = conformance.NotApplicable(
        server={"ping:ping": "reason", "gone:check": "reason"},
        bridge={"gone:http": "HTTP layer"},
    )
    rows, stale = conformance.classify(tmp_path, listed)
    assert [row.verdict for row in rows] == ["pass"]
    assert stale == ["gone:check", "gone:http", "ping:ping"]


def test_the_suite_summary_is_read_from_its_log(conformance: ModuleType) -> None:
    log = (
        "Running requirements 2026-07-28 (50 scenarios) against http://127.0.0.1:1/mcp\n"
        "...\n"
        "Not scored for 2026-07-28: 2 scenario(s) run, 1 failing.\n"
        "  ✗ tasks-lifecycle (extension)\n"
        "  ✓ http-header-validation (pending)\n"
    )
    assert conformance._suite_summary(log) == (
        50,
        {"tasks-lifecycle": "extension", "http-header-validation": "pending"},
    )
    with pytest.raises(RuntimeError):
        conformance._suite_summary("the suite crashed\n")


def test_every_listed_check_names_its_reason() -> None:
    listed = json.loads(LISTED.read_text("utf-8"))
    assert set(listed) == {"2026-07-28", "2025-11-25"}
    for revision, kinds in listed.items():
        assert set(kinds) == {"server", "bridge"}, revision
        assert not set(kinds["server"]) & set(kinds["bridge"]), revision
        for entries in kinds.values():
            assert entries, revision
            for key, reason in entries.items():
                scenario, _, check_id = key.partition(":")
                assert scenario, key
                assert check_id, key
                assert len(reason) > 20, key
