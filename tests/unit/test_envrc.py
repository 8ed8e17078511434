"""`.envrc`: caches, the virtual environment and temporary files stay under `./.cache/`, and
git is pointed at the repository's hooks and maintainer identity.

It is sourced in a scratch repository both the way direnv does (with its `PATH_add`) and the
way a shell without direnv does.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.unit._policy_repo import MAINTAINER, REPO_ROOT, run

ENVRC = REPO_ROOT / ".envrc"
CACHE_VARIABLES = [
    "UV_CACHE_DIR",
    "UV_PROJECT_ENVIRONMENT",
    "UV_PYTHON_INSTALL_DIR",
    "XDG_CACHE_HOME",
    "PYTHONPYCACHEPREFIX",
    "MYPY_CACHE_DIR",
    "RUFF_CACHE_DIR",
    "HYPOTHESIS_STORAGE_DIRECTORY",
    "TMPDIR",
]


def environment(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / ".githooks").mkdir(parents=True)
    shutil.copy2(ENVRC, root / ".envrc")
    shutil.copy2(REPO_ROOT / ".githooks" / "maintainer", root / ".githooks" / "maintainer")
    assert run(["git", "init", "-q"], cwd=root, env=environment(tmp_path)).returncode == 0
    return root


def source_envrc(checkout: Path, prelude: str = "") -> dict[str, str]:
    script = f'{prelude}\nsource ./.envrc\nenv -0 > "$1"\n'
    dump = checkout.parent / "env.bin"
    result = run(
        ["bash", "-c", script, "envrc-test", dump], cwd=checkout, env=environment(checkout.parent)
    )
    assert result.returncode == 0, result.stderr
    pairs = (item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
    return dict(pairs)


def git_config(checkout: Path, key: str) -> str:
    result = run(["git", "config", key], cwd=checkout, env=environment(checkout.parent))
    return result.stdout.strip()


def test_envrc_is_valid_bash() -> None:
    result = run(["bash", "-n", ENVRC], cwd=REPO_ROOT, env={"PATH": os.environ["PATH"]})
    assert result.returncode == 0, result.stderr


def test_caches_and_temporary_files_stay_under_dot_cache(checkout: Path) -> None:
    env = source_envrc(checkout)
    cache = checkout / ".cache"
    for name in CACHE_VARIABLES:
        assert Path(env[name]).is_relative_to(cache), name
    assert env["UV_PROJECT_ENVIRONMENT"] == str(cache / "venv")
    assert Path(env["TMPDIR"]).is_dir()
    assert env["PATH"].split(":")[0] == str(cache / "venv" / "bin")
    # pyproject.toml's coverage data_file already points into .cache/; COVERAGE_FILE would
    # override it.
    assert "COVERAGE_FILE" not in env
    # Helper variables do not leak into the shell that sourced the file.
    assert not [name for name in env if name.startswith("envrc_")]


def test_direnv_path_add_is_used_when_present(checkout: Path) -> None:
    env = source_envrc(checkout, 'PATH_add() { export ADDED_BY_DIRENV="$1"; }')
    assert env["ADDED_BY_DIRENV"] == ".cache/venv/bin"
    assert not env["PATH"].startswith(str(checkout))


def test_git_uses_the_hooks_and_the_maintainer_identity(checkout: Path) -> None:
    source_envrc(checkout)
    assert git_config(checkout, "core.hooksPath") == ".githooks"
    assert git_config(checkout, "user.useConfigOnly") == "true"
    assert git_config(checkout, "user.name") == MAINTAINER.name
    assert git_config(checkout, "user.email") == MAINTAINER.email


def test_gitignore_covers_the_cache_directory() -> None:
    lines = (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert ".cache/" in lines or "/.cache/" in lines
