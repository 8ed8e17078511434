"""The release workflow: tags only, one job with an OIDC token, and the checks before it.

Pins are checked for every workflow by test_workflow_pins.py; this module checks what the
release workflow itself promises (docs/development/ci.md, "Releases").
"""

from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information.

from tests.unit._policy_repo import REPO_ROOT

RELEASE = REPO_ROOT / ".github" / "workflows" / "release.yml"


def workflow() -> dict[Any, Any]:
    document: dict[Any, Any] = yaml.safe_load(RELEASE.read_text(encoding="utf-8"))
    return document


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def runs(job: str) -> str:
    return "\n".join(step.get("run", "") for step in steps(job))


def uses(job: str) -> list[str]:
    return [step["uses"].split("@")[0] for step in steps(job) if "uses" in step]


def test_only_a_version_tag_starts_it() -> None:
    # YAML reads the key `on` as the boolean true.
    assert workflow()[True] == {"push": {"tags": ["v*.*.*"]}}


def test_only_the_publish_job_gets_an_oidc_token() -> None:
    document = workflow()
    assert document["permissions"] == {"contents": "read"}
    jobs = document["jobs"]
    assert set(jobs) == {"build", "publish", "verify"}
    assert jobs["publish"]["permissions"] == {"id-token": "write"}
    for name in ("build", "verify"):
        assert "permissions" not in jobs[name]
    assert jobs["publish"]["environment"]["name"] == "pypi"


def test_publish_runs_no_code_of_the_repository() -> None:
    # The job that holds the token checks nothing out: it uploads what the build job checked.
    assert uses("publish") == ["actions/download-artifact", "astral-sh/setup-uv"]
    assert runs("publish").strip() == "uv publish --trusted-publishing always dist/*"
    assert workflow()["jobs"]["publish"]["needs"] == "build"


def test_the_build_is_checked_before_it_is_kept() -> None:
    build = runs("build")
    assert "uv build --no-sources" in build
    assert 'scripts/check-dist.py --tag "$TAG" dist' in build
    assert uses("build")[-1] == "actions/upload-artifact"
    for job in ("build", "publish", "verify"):
        for step in steps(job):
            if step.get("uses", "").startswith("astral-sh/setup-uv"):
                assert step["with"]["enable-cache"] is False
            if step.get("uses", "").startswith("actions/checkout"):
                assert step["with"]["persist-credentials"] is False


def test_the_published_release_is_launched_as_the_readme_shows() -> None:
    verify = workflow()["jobs"]["verify"]
    assert verify["needs"] == "publish"
    assert "--client-examples=release" in runs("verify")


def test_event_data_reaches_scripts_through_the_environment() -> None:
    for job in ("build", "publish", "verify"):
        for step in steps(job):
            assert "${{" not in step.get("run", ""), step
