"""Pure Nix evaluation for the tests of the repository's Nix files, without a Nix store.

`evaluate` runs `nix-instantiate --eval --strict --json` the way scripts/check-nix-offline.sh
does: no daemon, a dummy store, restricted evaluation, and nothing on the search path but
`nix/`, so an expression can reach neither nixpkgs nor any file outside the directory. The
tools these tests need are required, never skipped: a missing one fails with the package that
provides it.
"""

import json
import os
import shutil
import subprocess
from typing import Any, Final

from tests.unit._policy_repo import REPO_ROOT

__all__ = [
    "CHECKS_DIR",
    "NIX_DIR",
    "NixEvaluationError",
    "evaluate",
    "image_config",
    "require_tool",
]

NIX_DIR: Final = REPO_ROOT / "nix"
CHECKS_DIR: Final = NIX_DIR / "checks"

# A cold evaluation of the module takes well under a second; a minute means a hung tool.
EVALUATION_TIMEOUT_SECONDS: Final = 60

_PROVIDERS: Final = {
    "nix-instantiate": "Debian and Ubuntu: apt-get install nix-bin",
    "systemd-analyze": "part of systemd",
}


class NixEvaluationError(RuntimeError):
    """The expression did not evaluate; the message is nix-instantiate's own."""


def require_tool(name: str) -> str:
    """Return the path of a program the tests need, or fail saying where it comes from."""
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is required by this test ({_PROVIDERS.get(name, name)})")
    return found


def evaluate(expression: str) -> Any:
    """Evaluate a Nix expression strictly and return its value as JSON data.

    Args:
        expression: Nix code; `<nix/...>` names files of the repository's nix/ directory.

    Returns:
        The decoded JSON of the value.

    Raises:
        NixEvaluationError: The evaluation failed (a type check, an assertion, a throw).
    """
    command = [
        require_tool("nix-instantiate"),
        "--store",
        "dummy://",
        "--option",
        "restrict-eval",
        "true",
        "-I",
        f"nix={NIX_DIR}",
        "--eval",
        "--strict",
        "--json",
        "--expr",
        expression,
    ]
    environment = {key: value for key, value in os.environ.items() if key != "NIX_PATH"}
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=EVALUATION_TIMEOUT_SECONDS,
    )
    if result.returncode != 0:
        raise NixEvaluationError(result.stderr.strip())
    return json.loads(result.stdout)


def image_config() -> dict[str, Any]:
    """Return nix/image-config.nix as the image check reads it."""
    value = evaluate("import <nix/image-config.nix>")
    if not isinstance(value, dict):
        raise NixEvaluationError("nix/image-config.nix is not an attribute set")
    return value
