"""The git hooks, run by git itself on scratch repositories: good commits and pushes pass, bad
ones are refused and leave the history as it was."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit._policy_repo import (
    HOOKS_DIR,
    MAINTAINER,
    Identity,
    ScratchRepo,
    machine_path,
    run,
)

STRANGER = Identity("Someone Else", "someone@example.org")
AWS_KEY_LINE = 'KEY = "AKIA' + "Z" * 16 + '"\n'
MACHINE_PATH_LINE = f'ROOT = "{machine_path("home", "alice", "data")}"\n'


@pytest.fixture
def repo(tmp_path: Path) -> ScratchRepo:
    return ScratchRepo.create(tmp_path)


def refused(
    result: subprocess.CompletedProcess[str], repo: ScratchRepo, head: str, *needles: str
) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    assert repo.head() == head, "a refused commit must not move HEAD"
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["pre-commit", "commit-msg", "pre-push"])
def test_hooks_are_executable_scripts(name: str) -> None:
    hook = HOOKS_DIR / name
    assert os.access(hook, os.X_OK)
    text = hook.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "_policy.sh" in text


def test_good_commit_is_accepted(repo: ScratchRepo) -> None:
    before = repo.head()
    result = repo.commit("feat(core): add a module", {"src/m.py": "VALUE = 1\n"})
    assert result.returncode == 0, result.stderr
    assert repo.git("rev-parse", "HEAD~1").stdout.strip() == before


def test_author_option_is_refused(repo: ScratchRepo) -> None:
    head = repo.head()
    repo.write("a.txt", "a\n")
    repo.git("add", "a.txt")
    result = repo.git(
        "commit", "-q", "-m", "feat(core): add a", f"--author={STRANGER}", check=False
    )
    refused(result, repo, head, "author", STRANGER.email)


def test_committer_from_the_environment_is_refused(repo: ScratchRepo) -> None:
    head = repo.head()
    result = repo.commit("feat(core): add a", {"a.txt": "a\n"}, committer=STRANGER)
    refused(result, repo, head, "committer", STRANGER.email)


def test_amend_is_judged_by_the_original_author(repo: ScratchRepo) -> None:
    made = repo.commit("feat(core): add a", {"a.txt": "a\n"}, verify=False, author=STRANGER)
    assert made.returncode == 0
    head = repo.head()
    # git keeps the original author on --amend, and tells the hooks so.
    result = repo.git("commit", "-q", "--amend", "-m", "feat(core): add a file", check=False)
    refused(result, repo, head, "author", STRANGER.email)
    fixed = repo.git("commit", "-q", "--amend", "--reset-author", "-m", "feat(core): add a file")
    assert fixed.returncode == 0
    assert repo.git("log", "-1", "--format=%an <%ae>").stdout.strip() == str(MAINTAINER)


def test_missing_identity_is_reported(repo: ScratchRepo) -> None:
    repo.git("config", "user.useConfigOnly", "true")
    env = {
        key: value
        for key, value in repo.env().items()
        if not key.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_"))
    }
    result = run([repo.path / ".githooks" / "pre-commit"], cwd=repo.path, env=env)
    assert result.returncode != 0
    assert "no author identity is configured" in result.stderr
    assert "no committer identity is configured" in result.stderr


def test_bad_subject_is_refused(repo: ScratchRepo) -> None:
    head = repo.head()
    result = repo.commit("Added a module.", {"a.txt": "a\n"})
    refused(result, repo, head, "Conventional Commit", "ends with a period")


def test_generated_trailer_is_refused(repo: ScratchRepo) -> None:
    head = repo.head()
    message = "feat(core): add a\n\nCo-authored-by: Claude <noreply@anthropic.com>\n"
    result = repo.commit(message, {"a.txt": "a\n"})
    refused(result, repo, head, "names a bot or tool")


def commit_edited(
    repo: ScratchRepo, message: str, *options: str
) -> subprocess.CompletedProcess[str]:
    # A no-op editor makes git treat the message as edited, so it applies its cleanup.
    repo.extra_env["GIT_EDITOR"] = "true"
    message_file = repo.home / "edited.txt"
    message_file.write_text(message, encoding="utf-8")
    repo.write("a.txt", "a\n")
    repo.git("add", "a.txt")
    return repo.git("commit", "-q", "-e", *options, "-F", str(message_file), check=False)


def test_commit_msg_ignores_comments_git_strips(repo: ScratchRepo) -> None:
    message = "feat(core): add a\n\n# Co-authored-by: Claude <noreply@anthropic.com>\n"
    result = commit_edited(repo, message)
    assert result.returncode == 0, result.stderr
    assert repo.git("log", "-1", "--format=%B").stdout.strip() == "feat(core): add a"


def test_commit_msg_ignores_the_verbose_diff(repo: ScratchRepo) -> None:
    message = (
        "feat(core): add a\n"
        "# ------------------------ >8 ------------------------\n"
        "+Generated with a tool, in the diff that git shows below the scissors line\n"
    )
    result = commit_edited(repo, message, "--cleanup=scissors")
    assert result.returncode == 0, result.stderr
    assert repo.git("log", "-1", "--format=%B").stdout.strip() == "feat(core): add a"


def test_commit_msg_judges_comment_lines_git_may_keep(repo: ScratchRepo) -> None:
    # `git commit -F` without editing keeps comment lines, so the hook must judge them as CI
    # will judge the stored message.
    message = "feat(core): add a\n\n# \N{ROBOT FACE} Generated with a tool\n"
    message_file = repo.home / "kept.txt"
    message_file.write_text(message, encoding="utf-8")
    head = repo.head()
    repo.write("a.txt", "a\n")
    repo.git("add", "a.txt")
    result = repo.git("commit", "-q", "-F", str(message_file), check=False)
    refused(result, repo, head, "generated marker")
    assert repo.git("commit", "-q", "--no-verify", "-F", str(message_file)).returncode == 0
    assert "# \N{ROBOT FACE}" in repo.git("log", "-1", "--format=%B").stdout
    audit = repo.script("audit-attribution.sh", f"{head}..HEAD")
    assert audit.returncode != 0
    assert "generated marker" in audit.stderr


def test_commit_msg_without_a_file_is_a_usage_error(repo: ScratchRepo) -> None:
    result = repo.hook("commit-msg")
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_pre_commit_reads_the_index_not_the_working_tree(repo: ScratchRepo) -> None:
    # A bad edit that is not staged does not block the commit.
    repo.write("src/m.py", "VALUE = 1\n")
    repo.git("add", "src/m.py")
    repo.write("src/m.py", MACHINE_PATH_LINE)
    assert repo.commit("feat(core): add m").returncode == 0
    # A bad staged version is refused even when the working tree is clean again.
    head = repo.head()
    repo.git("add", "src/m.py")
    repo.write("src/m.py", "VALUE = 2\n")
    refused(repo.commit("feat(core): change m"), repo, head, "src/m.py:1", "machine path")


def test_commit_all_is_judged_by_its_temporary_index(repo: ScratchRepo) -> None:
    assert repo.commit("feat(core): add m", {"src/m.py": "VALUE = 1\n"}).returncode == 0
    head = repo.head()
    repo.write("src/m.py", AWS_KEY_LINE)
    result = repo.git("commit", "-q", "-a", "-m", "feat(core): change m", check=False)
    refused(result, repo, head, "src/m.py:1", "AWS access key id")


def test_commit_of_named_paths_ignores_other_staged_files(repo: ScratchRepo) -> None:
    repo.write("bad.py", AWS_KEY_LINE)
    repo.write("good.py", "VALUE = 1\n")
    repo.git("add", "bad.py", "good.py")
    result = repo.git("commit", "-q", "-m", "feat(core): add good", "--", "good.py", check=False)
    assert result.returncode == 0, result.stderr
    assert repo.git("ls-tree", "--name-only", "HEAD").stdout.split() == [".githooks", "good.py"]


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("src/__pycache__/m.cpython-311.pyc", "x", "cache"),
        ("keys/deploy.pem", "-----BEGIN " + "RSA PRIVATE KEY-----\n", "private key"),
        ("big.txt", "a" * (512 * 1024 + 1), "byte limit"),
    ],
)
def test_pre_commit_refuses_bad_files(
    repo: ScratchRepo, name: str, content: str, needle: str
) -> None:
    head = repo.head()
    refused(repo.commit("feat(core): add a file", {name: content}), repo, head, name, needle)


def test_allowance_markers_accept_fixtures(repo: ScratchRepo) -> None:
    fixture = (
        MACHINE_PATH_LINE.rstrip("\n") + "  # hygiene: allow-machine-path\n"
        'DSN = "postgres://app:' + "hunter2" + '@db/app"  # hygiene: allow-secret-fixture\n'
        'PLACEHOLDER = "postgresql://user:secret@localhost/app"\n'
    )
    result = repo.commit("test(sql): add fixtures", {"tests/fixtures.py": fixture})
    assert result.returncode == 0, result.stderr


def test_merge_commits_are_refused(repo: ScratchRepo) -> None:
    repo.git("checkout", "-q", "-b", "topic")
    assert repo.commit("feat(core): add t", {"t.txt": "t\n"}).returncode == 0
    repo.git("checkout", "-q", "main")
    assert repo.commit("feat(core): add m", {"m.txt": "m\n"}).returncode == 0
    head = repo.head()
    merged = repo.git(
        "merge", "-q", "--no-ff", "-m", "feat(core): merge topic", "topic", check=False
    )
    refused(merged, repo, head, "merge commits are not allowed")
    repo.git("merge", "--abort")
    repo.git("merge", "-q", "--no-ff", "--no-commit", "topic")
    concluded = repo.git("commit", "-q", "-m", "feat(core): merge topic", check=False)
    refused(concluded, repo, head, "merge commits are not allowed")


@pytest.fixture
def remote(repo: ScratchRepo, tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    repo.git("init", "-q", "--bare", str(bare))
    repo.git("remote", "add", "origin", str(bare))
    return bare


def remote_head(repo: ScratchRepo, branch: str) -> str:
    result = repo.git("ls-remote", "origin", f"refs/heads/{branch}")
    return result.stdout.split()[0] if result.stdout else ""


def test_pre_push_accepts_good_history(repo: ScratchRepo, remote: Path) -> None:
    assert repo.commit("feat(core): add a", {"a.txt": "a\n"}).returncode == 0
    result = repo.git("push", "-q", "origin", "main", check=False)
    assert result.returncode == 0, result.stderr
    assert "2 commit(s) follow the repository policy" in result.stderr
    assert remote_head(repo, "main") == repo.head()


def test_pre_push_refuses_commits_made_without_hooks(repo: ScratchRepo, remote: Path) -> None:
    repo.git("push", "-q", "origin", "main")
    pushed = repo.head()
    made = repo.commit("wip", {"a.txt": "a\n"}, verify=False, author=STRANGER)
    assert made.returncode == 0
    result = repo.git("push", "-q", "origin", "main", check=False)
    assert result.returncode != 0
    assert "not a Conventional Commit" in result.stderr
    assert STRANGER.email in result.stderr
    assert remote_head(repo, "main") == pushed


def test_pre_push_audits_only_what_the_remote_lacks(repo: ScratchRepo, remote: Path) -> None:
    # History the remote already has (here forced past the hook) is not judged again.
    assert repo.commit("wip", {"a.txt": "a\n"}, verify=False).returncode == 0
    repo.git("push", "-q", "--no-verify", "origin", "main")
    repo.git("checkout", "-q", "-b", "topic")
    assert repo.commit("feat(core): add b", {"b.txt": "b\n"}).returncode == 0
    result = repo.git("push", "-q", "origin", "topic", check=False)
    assert result.returncode == 0, result.stderr
    assert "1 commit(s) follow the repository policy" in result.stderr
    # A new branch that adds a bad commit is refused.
    assert repo.commit("oops", {"c.txt": "c\n"}, verify=False).returncode == 0
    refused_push = repo.git("push", "-q", "origin", "HEAD:refs/heads/other", check=False)
    assert refused_push.returncode != 0
    assert "oops" in refused_push.stderr
    assert remote_head(repo, "other") == ""


def test_pre_push_allows_deleting_a_branch(repo: ScratchRepo, remote: Path) -> None:
    repo.git("push", "-q", "origin", "main", "main:refs/heads/old")
    result = repo.git("push", "-q", "origin", ":refs/heads/old", check=False)
    assert result.returncode == 0, result.stderr
    assert remote_head(repo, "old") == ""
