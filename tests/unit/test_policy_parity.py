"""The git hooks and the CI audits apply one policy.

Each case is fed to the local hook that judges it (`pre-commit` or `commit-msg`), to `pre-push`,
to `scripts/audit-attribution.sh` on the same commit, and for files also to
`scripts/audit-hygiene.sh`. Every one of them must reach the verdict the case expects: they
agree with each other, accept what they must and refuse what they must.
"""

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.unit._policy_repo import MAINTAINER, Identity, ScratchRepo, machine_path

GOOD_SUBJECT = "feat(core): add the line framer"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    output: str


@pytest.fixture(scope="module")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> ScratchRepo:
    return ScratchRepo.create(tmp_path_factory.mktemp("parity"))


@pytest.fixture
def repo(shared_repo: ScratchRepo) -> Iterator[ScratchRepo]:
    base = shared_repo.head()
    yield shared_repo
    shared_repo.git("reset", "-q", "--hard", base)
    shared_repo.git("clean", "-q", "-f", "-d", "-x")


def verdict(result: subprocess.CompletedProcess[str]) -> Verdict:
    return Verdict(result.returncode == 0, result.stdout + result.stderr)


def recorded_verdicts(repo: ScratchRepo, parent: str) -> dict[str, Verdict]:
    """Judge the commit HEAD (made without hooks) the way pre-push and CI do."""
    head = repo.head()
    push_line = f"refs/heads/main {head} refs/heads/main {parent}\n"
    return {
        "pre-push": verdict(repo.hook("pre-push", "origin", "unused-url", stdin=push_line)),
        "audit-attribution": verdict(repo.script("audit-attribution.sh", f"{parent}..{head}")),
    }


def assert_all(verdicts: dict[str, Verdict], *, accepted: bool, mention: str = "") -> None:
    wrong = {name: v.output for name, v in verdicts.items() if v.accepted != accepted}
    assert not wrong, f"expected accepted={accepted}, but these disagree: {wrong}"
    if not accepted and mention:
        silent = [name for name, v in verdicts.items() if mention not in v.output]
        assert not silent, f"{silent} refused without naming {mention!r}"


# --- Identities --------------------------------------------------------------------------

IDENTITIES = [
    pytest.param(MAINTAINER, True, id="maintainer"),
    pytest.param(Identity("Someone Else", MAINTAINER.email), False, id="other-name"),
    pytest.param(Identity(MAINTAINER.name, "someone@example.org"), False, id="other-email"),
    pytest.param(
        Identity(MAINTAINER.name, MAINTAINER.email.upper()), False, id="email-in-capitals"
    ),
    pytest.param(Identity("GitHub", "noreply@github.com"), False, id="github-web-flow"),
    pytest.param(
        Identity("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com"),
        False,
        id="bot",
    ),
]


@pytest.mark.parametrize("role", ["author", "committer"])
@pytest.mark.parametrize(("identity", "accepted"), IDENTITIES)
def test_identity(repo: ScratchRepo, role: str, identity: Identity, accepted: bool) -> None:
    author = identity if role == "author" else MAINTAINER
    committer = identity if role == "committer" else MAINTAINER
    message = repo.home / "good-message.txt"
    message.write_text(GOOD_SUBJECT + "\n", encoding="utf-8")
    parent = repo.head()
    verdicts = {
        "pre-commit": verdict(repo.hook("pre-commit", author=author, committer=committer)),
        "commit-msg": verdict(
            repo.hook("commit-msg", str(message), author=author, committer=committer)
        ),
    }
    made = repo.commit(GOOD_SUBJECT, verify=False, author=author, committer=committer)
    assert made.returncode == 0, made.stderr
    verdicts |= recorded_verdicts(repo, parent)
    assert_all(verdicts, accepted=accepted, mention=role)


# --- Subjects and trailers ---------------------------------------------------------------

BODY = GOOD_SUBJECT + "\n\n"
BOT_MAIL = "[bot]@users.noreply.github.com"

MESSAGES = [
    # Subjects.
    pytest.param(GOOD_SUBJECT, True, id="subject"),
    pytest.param("fix(sql)!: refuse stacked statements", True, id="breaking"),
    pytest.param("refactor(tools/sql): split the validator", True, id="scope-with-slash"),
    pytest.param("chore(deps-dev.x_y): bump ruff", True, id="scope-punctuation"),
    pytest.param("feat(core): " + "x" * 60, True, id="subject-72-bytes"),
    pytest.param("feat(core): " + "x" * 61, False, id="subject-73-bytes"),
    pytest.param("add the line framer", False, id="no-type"),
    pytest.param("feat: add the line framer", False, id="no-scope"),
    pytest.param("feat(): add the line framer", False, id="empty-scope"),
    pytest.param("Feat(core): add the line framer", False, id="type-capitalised"),
    pytest.param("feat(Core): add the line framer", False, id="scope-capitalised"),
    pytest.param("wip(core): add the line framer", False, id="unknown-type"),
    pytest.param("feat(core):add the line framer", False, id="no-space"),
    pytest.param("feat(core): add the line framer.", False, id="trailing-period"),
    pytest.param("fixup! feat(core): add the line framer", False, id="fixup"),
    pytest.param("Merge branch 'topic'", False, id="merge-subject"),
    pytest.param('Revert "feat(core): add the line framer"', False, id="git-revert-subject"),
    pytest.param(GOOD_SUBJECT + "\nno blank line before the body", False, id="no-blank-line"),
    # Trailers and body lines that are allowed.
    pytest.param(BODY + "Co-authored-by: Ada Lovelace <ada@example.org>", True, id="human"),
    pytest.param(BODY + "Co-authored-by: Ai Tanaka <ai.tanaka@example.org>", True, id="name-ai"),
    pytest.param(BODY + f"Signed-off-by: {MAINTAINER}", True, id="signed-off-maintainer"),
    pytest.param(BODY + "Refs: #12", True, id="plain-trailer"),
    pytest.param(BODY + "Claude, Copilot and ChatGPT are named in prose here.", True, id="prose"),
    pytest.param(
        BODY + "The fixtures are generated by the suite itself.", True, id="generated-mid"
    ),
    pytest.param("docs(readme): explain the AI-facing contract", True, id="subject-names-ai"),
    # Generated trailers and markers.
    pytest.param(BODY + "Co-authored-by: Claude <noreply@anthropic.com>", False, id="claude"),
    pytest.param(
        BODY + "Co-Authored-By: Claude Opus 4 <noreply@anthropic.com>", False, id="claude-caps"
    ),
    pytest.param(
        BODY + "co-authored-by: Copilot <175728472+Copilot@users.noreply.github.com>",
        False,
        id="copilot-lowercase-key",
    ),
    pytest.param(
        BODY + f"Co-authored-by: dependabot[bot] <49699333+dependabot{BOT_MAIL}>",
        False,
        id="dependabot",
    ),
    pytest.param(
        BODY + f"Signed-off-by: renovate[bot] <29139614+renovate{BOT_MAIL}>",
        False,
        id="signed-off-by-bot",
    ),
    pytest.param(BODY + "Reviewed-by: GitHub <noreply@github.com>", False, id="github-web-flow"),
    pytest.param(BODY + "Co-authored-by: Some AI <helper@example.org>", False, id="word-ai"),
    pytest.param(BODY + "Co-authored-by: gpt-4o <model@example.org>", False, id="gpt"),
    pytest.param(BODY + "Co-authored-by: ChatGPT <chat@example.org>", False, id="chatgpt"),
    pytest.param(
        BODY + "Co-authored-by: Cursor Agent <cursoragent@cursor.com>", False, id="cursor"
    ),
    pytest.param(BODY + "Co-authored-by: aider <aider@aider.chat>", False, id="aider"),
    pytest.param(BODY + "Co-authored-by: Gemini Code Assist <g@example.org>", False, id="gemini"),
    pytest.param(
        BODY + f"Co-authored-by: Devin <158243242+devin-ai-integration{BOT_MAIL}>",
        False,
        id="devin",
    ),
    pytest.param(BODY + "Co-authored-by: OpenAI Codex <codex@openai.com>", False, id="codex"),
    pytest.param(
        BODY + "\N{ROBOT FACE} Generated with [Claude Code](https://claude.com/claude-code)",
        False,
        id="robot-generated-with",
    ),
    pytest.param(BODY + "Generated with ChatGPT", False, id="generated-with"),
    pytest.param(BODY + "generated by an assistant", False, id="generated-by-lowercase"),
    pytest.param(BODY + "- Generated using a model", False, id="generated-using-bullet"),
    pytest.param(BODY + "Generated-by: codegen 1.2", False, id="generated-by-key"),
    pytest.param(BODY + "Assisted-by: Cursor", False, id="assisted-by"),
    pytest.param(BODY + "AI-Assisted: true", False, id="ai-assisted"),
    pytest.param(BODY + "Made-with: Windsurf", False, id="made-with"),
    pytest.param(BODY + "Done :robot:", False, id="robot-shortcode"),
]


@pytest.mark.parametrize(("message", "accepted"), MESSAGES)
def test_message(repo: ScratchRepo, message: str, accepted: bool) -> None:
    message_file = repo.home / "message-under-test.txt"
    message_file.write_text(message + "\n", encoding="utf-8")
    parent = repo.head()
    verdicts = {"commit-msg": verdict(repo.hook("commit-msg", str(message_file)))}
    made = repo.commit(message, verify=False)
    assert made.returncode == 0, made.stderr
    verdicts |= recorded_verdicts(repo, parent)
    assert_all(verdicts, accepted=accepted)


# --- Files -------------------------------------------------------------------------------

HOME_PATH = machine_path("home", "alice", "project", "notes.txt")
PRIVATE_KEY = "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
SIZE_LIMIT = 512 * 1024
LOCK_SIZE_LIMIT = 2 * 1024 * 1024

FILES = [
    # System paths and path-like text a program legitimately names.
    pytest.param("src/ok.py", 'TARGET = "/proc/self/root/etc/passwd"\n', True, id="proc-root"),
    pytest.param("src/ok.py", 'DEVICES = ["/dev/zero", "/etc/passwd"]\n', True, id="system"),
    pytest.param("README.md", "Socket: `/run/mcp-server-suite/mcp.sock`.\n", True, id="run"),
    pytest.param("nix/x.nix", 'dir = "/safe_data_dir"; s = "/nix/store/abc";\n', True, id="nix"),
    pytest.param("docs.md", "Binaries in /usr/lib/postgresql/16/bin and /tmp.\n", True, id="usr"),
    pytest.param("src/ok.py", 'p = f"{tmp}/root/ok.txt"\n', True, id="variable-prefix"),
    pytest.param("docs.md", "See https://example.org/home/alice/notes.\n", True, id="url"),
    pytest.param("docs.md", "Home directories such as /home/ are hidden.\n", True, id="bare-home"),
    pytest.param(
        "tests/t.py", 'DSN = "postgresql://user:example@localhost/db"\n', True, id="dsn-example"
    ),
    pytest.param("tests/t.py", 'DSN = "postgres://app:${PGPASSWORD}@db/app"\n', True, id="dsn-env"),
    pytest.param("tests/t.py", 'DSN = "postgres://app:<password>@db/app"\n', True, id="dsn-mask"),
    pytest.param(
        "tests/t.py", 'D = f"postgres://{role}:{secret}%zz@/app"\n', True, id="dsn-fstring"
    ),
    pytest.param(
        "tests/t.py", 'D = "postgres://app:' + "pa$word" + '@db/app"\n', False, id="dsn-dollar"
    ),
    pytest.param(
        "tests/t.py",
        f'P = "{HOME_PATH}"  # hygiene: allow-machine-path\n',
        True,
        id="path-marker",
    ),
    pytest.param(
        "tests/t.py",
        'DSN = "postgres://app:' + "hunter2" + '@db/app"  # hygiene: allow-secret-fixture\n',
        True,
        id="secret-marker",
    ),
    # Absolute machine paths.
    pytest.param("docs.md", f"Run it from {HOME_PATH}.\n", False, id="home"),
    pytest.param("src/x.py", f'P = "{machine_path("Users", "bob", "x")}"\n', False, id="users"),
    pytest.param("src/x.py", f"P = '{machine_path('root', '.ssh', 'id')}'\n", False, id="root"),
    pytest.param("x.sh", f"cd {machine_path('work', 'main')}\n", False, id="work"),
    pytest.param("x.md", f"({machine_path('tmp', 'research', 'a')})\n", False, id="research"),
    pytest.param("x.txt", f"out={machine_path('farm', 'build', '1')}\n", False, id="farm"),
    pytest.param("x.txt", f" {machine_path('var', 'folders', 'xy', 'T')}\n", False, id="macos-t"),
    pytest.param("x.txt", "path C:" + "\\Users\\carol\\x\n", False, id="windows"),
    pytest.param(
        "x.txt", "url file://" + machine_path("home", "dan", "f") + "\n", False, id="file"
    ),
    pytest.param(
        "x.txt",
        f'P = "{HOME_PATH}"  # hygiene: allow-secret-fixture\n',
        False,
        id="wrong-marker",
    ),
    # Secrets.
    pytest.param("keys/deploy.pem", PRIVATE_KEY, False, id="private-key"),
    pytest.param("x.py", 'K = "AKIA' + "Q" * 16 + '"\n', False, id="aws-key"),
    pytest.param("x.py", 'T = "ghp_' + "a" * 36 + '"\n', False, id="github-token"),
    pytest.param("x.py", 'T = "github_pat_' + "b" * 30 + '"\n', False, id="github-pat"),
    pytest.param("x.py", 'T = "xoxb-' + "1" * 12 + '-abc"\n', False, id="slack"),
    pytest.param("x.py", 'D = "postgres://app:' + "hunter2" + '@db/app"\n', False, id="dsn"),
    pytest.param("x.py", 'D = "postgres://app:' + "pass" + '@db/app"\n', False, id="dsn-pass"),
    # Caches, build outputs, key stores and environment files.
    pytest.param("src/__pycache__/m.cpython-311.pyc", "x", False, id="pycache"),
    pytest.param("src/m.pyc", "x", False, id="pyc"),
    pytest.param(".coverage", "x", False, id="coverage"),
    pytest.param(".coverage.host.1", "x", False, id="coverage-parallel"),
    pytest.param(".cache/uv/x", "x", False, id="cache"),
    pytest.param(".venv/bin/python", "x", False, id="venv"),
    pytest.param("dist/pkg-1.0.tar.gz", "x", False, id="dist"),
    pytest.param("build/lib/m.py", "x", False, id="build"),
    pytest.param("pkg.egg-info/PKG-INFO", "x", False, id="egg-info"),
    pytest.param("node_modules/x/index.js", "x", False, id="node-modules"),
    pytest.param("result", "x", False, id="nix-result"),
    pytest.param("id_ed25519", "x", False, id="ssh-key-file"),
    pytest.param("certs/client.p12", "x", False, id="key-store"),
    pytest.param(".env", "TOKEN=abc\n", False, id="dotenv"),
    pytest.param(".env.local", "TOKEN=abc\n", False, id="dotenv-local"),
    pytest.param(".env.example", "TOKEN=\n", True, id="dotenv-example"),
    pytest.param(".envrc", "export A=1\n", True, id="envrc"),
    pytest.param("src/build.py", "x = 1\n", True, id="build-module"),
    # Sizes.
    pytest.param("data/ok.txt", "a" * SIZE_LIMIT, True, id="size-at-limit"),
    pytest.param("data/big.txt", "a" * (SIZE_LIMIT + 1), False, id="size-over-limit"),
    pytest.param("uv.lock", "a" * (1024 * 1024), True, id="lock-file-1mib"),
    pytest.param("flake.lock", "a" * (LOCK_SIZE_LIMIT + 1), False, id="lock-file-over-limit"),
]


def _judge_files(repo: ScratchRepo, name: str) -> dict[str, Verdict]:
    repo.git("add", "--", name)
    verdicts = {"pre-commit": verdict(repo.hook("pre-commit"))}
    parent = repo.head()
    made = repo.commit("test(policy): add a file", verify=False)
    assert made.returncode == 0, made.stderr
    verdicts |= recorded_verdicts(repo, parent)
    verdicts["audit-hygiene"] = verdict(repo.script("audit-hygiene.sh"))
    return verdicts


@pytest.mark.parametrize(("name", "content", "accepted"), FILES)
def test_file(repo: ScratchRepo, name: str, content: str, accepted: bool) -> None:
    repo.write(name, content)
    assert_all(_judge_files(repo, name), accepted=accepted, mention=name)


@pytest.mark.parametrize(
    ("target", "accepted"),
    [
        pytest.param("../data/ok.txt", True, id="relative"),
        pytest.param(machine_path("nix", "store", "abc-result"), False, id="absolute"),
    ],
)
def test_symlink(repo: ScratchRepo, target: str, accepted: bool) -> None:
    link = repo.path / "links" / "data"
    link.parent.mkdir()
    link.symlink_to(target)
    assert_all(_judge_files(repo, "links/data"), accepted=accepted, mention="links/data")


def test_cases_cover_both_outcomes() -> None:
    # A table with only accepting (or only refusing) cases could not catch a hook and a
    # script that both accept everything, or both refuse everything.
    for table in (IDENTITIES, MESSAGES, FILES):
        outcomes = {case.values[-1] for case in table}
        assert outcomes == {True, False}
