"""The CI audits, run on scratch repositories with good and bad commits and files.

`scripts/audit-attribution.sh` judges the commits of a range; `scripts/audit-hygiene.sh`
judges the files of the index or of the working tree.
"""

from pathlib import Path

import pytest

from tests.unit._policy_repo import (
    SCRIPTS_DIR,
    ZERO_SHA,
    Identity,
    ScratchRepo,
    machine_path,
    run,
)

STRANGER = Identity("Someone Else", "someone@example.org")
SECRET_LINE = 'TOKEN = "ghp_' + "x" * 36 + '"\n'
MACHINE_PATH_LINE = f"cd {machine_path('home', 'alice', 'project')}\n"


@pytest.fixture
def repo(tmp_path: Path) -> ScratchRepo:
    return ScratchRepo.create(tmp_path)


def commit(repo: ScratchRepo, message: str, files: dict[str, str] | None = None) -> str:
    made = repo.commit(message, files)
    assert made.returncode == 0, made.stderr
    return repo.head()


def commit_unchecked(
    repo: ScratchRepo,
    message: str,
    files: dict[str, str] | None = None,
    author: Identity | None = None,
) -> str:
    made = repo.commit(message, files, verify=False, author=author)
    assert made.returncode == 0, made.stderr
    return repo.head()


def short(repo: ScratchRepo, commit_id: str) -> str:
    return repo.git("rev-parse", "--short=12", commit_id).stdout.strip()


# --- audit-attribution.sh ---------------------------------------------------------------


def test_good_range_passes(repo: ScratchRepo) -> None:
    base = repo.head()
    commit(repo, "feat(core): add a", {"a.txt": "a\n"})
    commit(repo, "fix(core): correct a", {"a.txt": "b\n"})
    result = repo.script("audit-attribution.sh", f"{base}..HEAD")
    assert result.returncode == 0, result.stderr
    assert "2 commit(s)" in result.stdout


def test_every_bad_commit_is_named(repo: ScratchRepo) -> None:
    base = repo.head()
    first = commit_unchecked(repo, "added a", files={"a.txt": "a\n"})
    commit(repo, "feat(core): add b", {"b.txt": "b\n"})
    third = commit_unchecked(repo, "feat(core): add c", files={"c.txt": "c\n"}, author=STRANGER)
    result = repo.script("audit-attribution.sh", f"{base}..HEAD")
    assert result.returncode == 1
    assert f"commit {short(repo, first)}: subject" in result.stderr
    assert f"commit {short(repo, third)}: author" in result.stderr
    assert result.stderr.count("policy:") == 2


def test_one_revision_audits_its_whole_history(repo: ScratchRepo) -> None:
    bad = commit_unchecked(repo, "added a", files={"a.txt": "a\n"})
    commit(repo, "feat(core): add b", {"b.txt": "b\n"})
    whole = repo.script("audit-attribution.sh", "HEAD")
    assert whole.returncode == 1
    assert short(repo, bad) in whole.stderr
    after_bad = repo.script("audit-attribution.sh", f"{bad}..HEAD")
    assert after_bad.returncode == 0, after_bad.stderr


def test_merge_commit_is_refused(repo: ScratchRepo) -> None:
    base = repo.head()
    repo.git("checkout", "-q", "-b", "topic")
    commit(repo, "feat(core): add t", {"t.txt": "t\n"})
    repo.git("checkout", "-q", "main")
    commit(repo, "feat(core): add m", {"m.txt": "m\n"})
    repo.git("merge", "-q", "--no-verify", "--no-ff", "-m", "feat(core): merge topic", "topic")
    result = repo.script("audit-attribution.sh", f"{base}..HEAD")
    assert result.returncode == 1
    assert f"commit {short(repo, 'HEAD')}: merge commit" in result.stderr


def test_file_removed_later_is_still_refused(repo: ScratchRepo) -> None:
    base = repo.head()
    leaked = commit_unchecked(repo, "feat(core): add settings", files={"settings.py": SECRET_LINE})
    repo.git("rm", "-q", "settings.py")
    commit(repo, "fix(core): drop settings")
    result = repo.script("audit-attribution.sh", f"{base}..HEAD")
    assert result.returncode == 1
    assert f"commit {short(repo, leaked)}: settings.py:1: GitHub token" in result.stderr
    # The secret itself never reaches the log.
    assert "x" * 36 not in result.stderr
    # The tree no longer holds it, which is all the hygiene audit can see.
    assert repo.script("audit-hygiene.sh").returncode == 0


def test_only_files_a_commit_changes_are_judged(repo: ScratchRepo) -> None:
    commit_unchecked(repo, "feat(core): add notes", files={"notes.md": MACHINE_PATH_LINE})
    before = repo.head()
    commit(repo, "feat(core): add b", {"b.txt": "b\n"})
    result = repo.script("audit-attribution.sh", f"{before}..HEAD")
    assert result.returncode == 0, result.stderr


def test_push_of_a_new_branch_audits_the_whole_history(repo: ScratchRepo) -> None:
    commit(repo, "feat(core): add a", {"a.txt": "a\n"})
    result = repo.script("audit-attribution.sh", "--push", ZERO_SHA, repo.head())
    assert result.returncode == 0, result.stderr
    assert "2 commit(s)" in result.stdout


def test_push_audits_only_its_own_commits(repo: ScratchRepo) -> None:
    bad = commit_unchecked(repo, "added a", files={"a.txt": "a\n"})
    commit(repo, "feat(core): add b", {"b.txt": "b\n"})
    result = repo.script("audit-attribution.sh", "--push", bad, repo.head())
    assert result.returncode == 0, result.stderr
    assert "1 commit(s)" in result.stdout
    # A force push leaves a `before` this clone does not have: the whole history is audited.
    unknown = "1234567890" * 4
    forced = repo.script("audit-attribution.sh", "--push", unknown, repo.head())
    assert forced.returncode == 1
    assert short(repo, bad) in forced.stderr


def test_identity_from_the_base_is_used(repo: ScratchRepo) -> None:
    base = repo.head()
    repo.git("config", "--file", ".githooks/maintainer", "maintainer.name", STRANGER.name)
    repo.git("config", "--file", ".githooks/maintainer", "maintainer.email", STRANGER.email)
    repo.git("add", ".githooks/maintainer")
    made = repo.git(
        "commit",
        "-q",
        "--no-verify",
        "-m",
        "chore(hooks): change the maintainer",
        author=STRANGER,
        committer=STRANGER,
    )
    assert made.returncode == 0
    own = repo.script("audit-attribution.sh", f"{base}..HEAD")
    assert own.returncode == 0, "judged by its own identity file, the change approves itself"
    judged = repo.script("audit-attribution.sh", "--identity-rev", base, f"{base}..HEAD")
    assert judged.returncode == 1
    assert "author" in judged.stderr
    assert "committer" in judged.stderr


def test_empty_range_passes(repo: ScratchRepo) -> None:
    result = repo.script("audit-attribution.sh", "HEAD..HEAD")
    assert result.returncode == 0, result.stderr
    assert "0 commit(s)" in result.stdout


def test_unknown_range_fails(repo: ScratchRepo) -> None:
    result = repo.script("audit-attribution.sh", "no-such-branch..HEAD")
    assert result.returncode == 1
    assert "cannot list the commits" in result.stderr


def test_missing_identity_file_fails_closed(repo: ScratchRepo) -> None:
    (repo.path / ".githooks" / "maintainer").unlink()
    result = repo.script("audit-attribution.sh", "HEAD")
    assert result.returncode != 0
    assert "cannot read maintainer.name" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-range"),
        pytest.param(["a..b", "c..d"], id="two-ranges"),
        pytest.param(["--push", ZERO_SHA], id="push-one-argument"),
        pytest.param(["--identity-rev"], id="identity-rev-no-argument"),
        pytest.param(["--bogus", "HEAD"], id="unknown-option"),
    ],
)
def test_usage_errors(repo: ScratchRepo, args: list[str]) -> None:
    result = repo.script("audit-attribution.sh", *args)
    assert result.returncode == 2
    assert "Usage" in result.stderr


# --- audit-hygiene.sh -------------------------------------------------------------------


def test_clean_index_passes(repo: ScratchRepo) -> None:
    commit(repo, "feat(core): add a", {"src/a.py": "VALUE = 1\n"})
    result = repo.script("audit-hygiene.sh")
    assert result.returncode == 0, result.stderr
    assert "file(s) in the index follow the repository policy" in result.stdout


def test_index_problems_are_all_named(repo: ScratchRepo) -> None:
    repo.write("notes.md", MACHINE_PATH_LINE)
    repo.write("settings.py", SECRET_LINE)
    repo.write("src/__pycache__/m.cpython-311.pyc", "x")
    repo.git("add", "-A")
    result = repo.script("audit-hygiene.sh")
    assert result.returncode == 1
    assert "index: notes.md:1: absolute machine path" in result.stderr
    assert "index: settings.py:1: GitHub token" in result.stderr
    assert "index: src/__pycache__/m.cpython-311.pyc: cache" in result.stderr


def test_worktree_mode_sees_untracked_and_modified_files(repo: ScratchRepo) -> None:
    commit(repo, "feat(core): add a", {"a.py": "VALUE = 1\n"})
    repo.write("a.py", SECRET_LINE)
    repo.write("new.md", MACHINE_PATH_LINE)
    repo.write(".gitignore", "ignored.md\n")
    repo.write("ignored.md", MACHINE_PATH_LINE)
    assert repo.script("audit-hygiene.sh").returncode == 0
    result = repo.script("audit-hygiene.sh", "--worktree")
    assert result.returncode == 1
    assert "working tree: a.py:1: GitHub token" in result.stderr
    assert "working tree: new.md:1: absolute machine path" in result.stderr
    assert "ignored.md" not in result.stderr


def test_audit_leaves_the_repository_as_it_was(repo: ScratchRepo) -> None:
    repo.write("new.md", "text\n")
    repo.write("a.py", "VALUE = 1\n")
    repo.git("add", "a.py")
    git_dir = repo.path / ".git"

    def snapshot() -> dict[str, bytes]:
        return {
            str(path.relative_to(git_dir)): path.read_bytes()
            for path in sorted(git_dir.rglob("*"))
            if path.is_file()
        }

    before = snapshot()
    assert repo.script("audit-hygiene.sh", "--worktree").returncode == 0
    assert repo.script("audit-hygiene.sh").returncode == 0
    assert snapshot() == before


def test_runs_from_a_subdirectory(repo: ScratchRepo) -> None:
    repo.write("src/deep/a.py", SECRET_LINE)
    repo.git("add", "-A")
    nested = run([SCRIPTS_DIR / "audit-hygiene.sh"], cwd=repo.path / "src" / "deep", env=repo.env())
    assert nested.returncode == 1
    assert "src/deep/a.py:1: GitHub token" in nested.stderr


def test_hygiene_usage_error(repo: ScratchRepo) -> None:
    result = repo.script("audit-hygiene.sh", "--bogus")
    assert result.returncode == 2
    assert "Usage" in result.stderr
