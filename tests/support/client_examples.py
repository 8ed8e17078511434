"""The README's client configurations: found, classified, and made runnable on this machine.

Every ```json block of README.md that holds `mcpServers` is a configuration a user pastes
into an MCP client. Each is classified by what it needs to run (`KINDS`), and its example
paths are replaced by real ones (`PLACEHOLDERS`); nothing else of it is changed.

A pytest option chooses which kinds a run launches, `--client-examples` (default
`DEFAULT_KINDS`, the ones any machine with the suite's prerequisites runs). The jobs that
have Nix and a Docker daemon, or a release on PyPI, pass the other kinds, so every kind runs
somewhere, and none is ever skipped where it is selected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

__all__ = [
    "DEFAULT_KINDS",
    "KINDS",
    "PLACEHOLDERS",
    "ClientExample",
    "classify",
    "readme_examples",
    "selected_kinds",
    "substitute",
]

# What each kind needs, for the reader of a failure.
KINDS: Final = {
    "clone": "a clone with .cache/venv (scripts/quickstart.sh)",
    "socket": "a stdio-to-socket relay (python3, or socat) and a socket-activated listener "
    "(emulated here as systemd's Accept=yes)",
    "release": "the package on PyPI and uvx",
    "nix": "Nix",
    "docker": "a Docker daemon with mcp-server-suite:local loaded",
}
DEFAULT_KINDS: Final = ("clone", "socket")

# The example paths of the README, as a user replaces them.
PLACEHOLDERS: Final = (
    "/srv/mcp-server-suite",
    "/srv/mcp-data",
    "/run/secrets/mcp-sql-dsn",
    "/run/mcp-server-suite/mcp.sock",
)

_JSON_BLOCK: Final = re.compile(r"^```json\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_HEADING: Final = re.compile(r"^#+ (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class ClientExample:
    """One `mcpServers` entry of the README.

    Attributes:
        heading: The README heading it stands under.
        name: Its key in `mcpServers`.
        server: `command`, and optionally `args` and `env`, as written.
    """

    heading: str
    name: str
    server: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return classify(self.server)

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.heading}"


def readme_examples(readme: Path) -> list[ClientExample]:
    """Every client configuration of the README, in order.

    Raises:
        ValueError: A ```json block names `mcpServers` but is not one JSON document.
    """
    text = readme.read_text(encoding="utf-8")
    examples = []
    for match in _JSON_BLOCK.finditer(text):
        block = match.group(1)
        if "mcpServers" not in block:
            continue
        headings = _HEADING.findall(text, 0, match.start())
        heading = headings[-1] if headings else "top"
        document = json.loads(block)
        for name, server in document["mcpServers"].items():
            examples.append(ClientExample(heading, name, server))
    return examples


def classify(server: Mapping[str, Any]) -> str:
    """The kind of a configuration, from its command.

    Raises:
        ValueError: The command is none of the kinds: a new kind of example needs a launcher
            here before the README may show it.
    """
    command = str(server["command"])
    if command.endswith("/.cache/venv/bin/mcp-server-suite"):
        return "clone"
    # The socket's client is a relay between stdio and the Unix socket: Python's standard
    # library in a few lines (`python3 -c`), or socat.
    kinds = {
        "python3": "socket",
        "socat": "socket",
        "uvx": "release",
        "nix": "nix",
        "docker": "docker",
    }
    if command in kinds:
        return kinds[command]
    raise ValueError(f"no launcher for a client configuration whose command is {command!r}")


def substitute(value: Any, paths: Mapping[str, str]) -> Any:
    """Replace the example paths in every string of a configuration."""
    if isinstance(value, str):
        for placeholder, real in paths.items():
            value = value.replace(placeholder, real)
        return value
    if isinstance(value, list):
        return [substitute(item, paths) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, paths) for key, item in value.items()}
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--client-examples",
        default=",".join(DEFAULT_KINDS),
        help="comma-separated kinds of README client configurations to launch "
        f"({', '.join(KINDS)}; default {','.join(DEFAULT_KINDS)})",
    )


def selected_kinds(config: pytest.Config) -> list[str]:
    """The kinds this run launches.

    Raises:
        pytest.UsageError: An unknown kind was asked for.
    """
    kinds = [kind.strip() for kind in str(config.getoption("client_examples")).split(",")]
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise pytest.UsageError(f"--client-examples: unknown kind(s) {unknown}; see {list(KINDS)}")
    return kinds
