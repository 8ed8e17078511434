"""The documentation's client configurations: found, classified, and made runnable here.

Every ```json block of README.md and docs/ that holds `mcpServers` (or `servers`, VS Code's
key) is a configuration a user pastes into an MCP client. Each is classified by what it needs
to run (`KINDS`), and its example paths are replaced by real ones (`PLACEHOLDERS`); nothing
else of it is changed.

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
    "document_examples",
    "documentation_examples",
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

# The example paths of the documentation, as a user replaces them.
PLACEHOLDERS: Final = (
    "/srv/mcp-server-suite",
    "/srv/mcp-data",
    "/run/secrets/mcp-sql-dsn",
    "/run/mcp-server-suite/mcp.sock",
)

_JSON_BLOCK: Final = re.compile(r"^```json\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_HEADING: Final = re.compile(r"^#+ (.+)$", re.MULTILINE)
# The top-level key of a configuration file: `mcpServers` for most clients, `servers` for VS
# Code, whose stdio entries also name their transport.
CONFIGURATION_KEYS: Final = ("mcpServers", "servers")
_CONFIGURATION: Final = re.compile(r'"(?:mcpServers|servers)"\s*:')


@dataclass(frozen=True)
class ClientExample:
    """One entry of a client configuration in the documentation.

    Attributes:
        document: The file it is written in, relative to the repository.
        heading: The heading it stands under.
        key: The configuration's top-level key (`mcpServers` or `servers`).
        name: Its key in that object.
        server: `command`, and optionally `args`, `env` and `type`, as written.
    """

    document: str
    heading: str
    key: str
    name: str
    server: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return classify(self.server)

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.key}-{Path(self.document).stem}-{self.heading}"


def document_examples(path: Path, root: Path) -> list[ClientExample]:
    """Every client configuration of one document, in order.

    Args:
        path: The document.
        root: The repository, which `ClientExample.document` is relative to.

    Raises:
        ValueError: A ```json block names a configuration key but is not one JSON document
            with exactly one of them.
    """
    text = path.read_text(encoding="utf-8")
    examples = []
    for match in _JSON_BLOCK.finditer(text):
        block = match.group(1)
        if not _CONFIGURATION.search(block):
            continue
        headings = _HEADING.findall(text, 0, match.start())
        heading = headings[-1] if headings else "top"
        document = json.loads(block)
        keys = [key for key in CONFIGURATION_KEYS if key in document]
        if len(keys) != 1:
            raise ValueError(f"{path.name}: a configuration block with the keys {keys}")
        for name, server in document[keys[0]].items():
            examples.append(
                ClientExample(str(path.relative_to(root)), heading, keys[0], name, server)
            )
    return examples


def documentation_examples(documents: list[Path], root: Path) -> list[ClientExample]:
    """Every client configuration of the documentation, in the order of `documents`."""
    return [example for path in documents for example in document_examples(path, root)]


def classify(server: Mapping[str, Any]) -> str:
    """The kind of a configuration, from its command.

    Raises:
        ValueError: The command is none of the kinds: a new kind of example needs a launcher
            here before the documentation may show it.
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
        help="comma-separated kinds of documented client configurations to launch "
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
