"""The documentation's fenced blocks: found, with their language, heading and marker.

The documents are README.md, SECURITY.md, CONTRIBUTING.md and every page under docs/
(`DOCUMENTS`). A shell block is preceded, on the line before its fence, by a marker
comment: `<!-- doc-test: NAME -->` when tests/e2e/test_doc_commands.py runs it in the scenario
NAME, or `<!-- illustration: WHY -->` when it is not run, with the reason
(docs/development/documentation.md states the convention).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "DOCUMENTS",
    "SHELL_LANGUAGES",
    "Block",
    "blocks",
    "documents",
    "shell_blocks",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]

# The root documents; every Markdown file under docs/ joins them.
DOCUMENTS: Final = ("README.md", "SECURITY.md", "CONTRIBUTING.md")

# Fence languages whose blocks a reader pastes into a shell.
SHELL_LANGUAGES: Final = frozenset({"bash", "sh", "shell", "console", "zsh"})

# A fence opens with three or more backticks or tildes, possibly indented (in a list), and an
# optional language; it closes with the same run of the same character at least as long.
_OPEN: Final = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_HEADING: Final = re.compile(r"^#{1,6} +(?P<title>.+?) *#*$")
_MARKER: Final = re.compile(r"^ *<!-- *(?P<kind>doc-test|illustration): *(?P<value>.*?) *-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document.

    Attributes:
        path: The document, relative to the repository.
        line: The line of its opening fence, from 1.
        language: The fence's language (the first word of its info string), or "".
        heading: The heading it stands under, or "top".
        marker: `doc-test` or `illustration` when a marker comment precedes it, else None.
        marker_value: The scenario's name or the reason, as the marker gives it.
        text: The block's content, without the fences and the indentation of the fence.
    """

    path: str
    line: int
    language: str
    heading: str
    marker: str | None
    marker_value: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def documents(root: Path = REPO_ROOT) -> list[Path]:
    """The documentation's Markdown files, in a fixed order."""
    pages = sorted((root / "docs").rglob("*.md"))
    return [root / name for name in DOCUMENTS] + pages


def blocks(path: Path, root: Path = REPO_ROOT) -> Iterator[Block]:
    """Every fenced block of one document, in order.

    Raises:
        ValueError: A fence is never closed.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    heading = "top"
    index = 0
    while index < len(lines):
        line = lines[index]
        title = _HEADING.match(line)
        if title is not None:
            heading = title["title"]
        opened = _OPEN.match(line)
        if opened is None:
            index += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        closing = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}} *$")
        end = next((at for at in range(index + 1, len(lines)) if closing.match(lines[at])), None)
        if end is None:
            raise ValueError(f"{path.relative_to(root)}:{index + 1}: a fence is never closed")
        previous = lines[index - 1] if index > 0 else ""
        marker = _MARKER.match(previous)
        body = [
            text[indent:] if text[:indent].isspace() else text for text in lines[index + 1 : end]
        ]
        yield Block(
            path=str(path.relative_to(root)),
            line=index + 1,
            language=opened["info"].strip().split(" ")[0] if opened["info"].strip() else "",
            heading=heading,
            marker=marker["kind"] if marker else None,
            marker_value=marker["value"] if marker else "",
            text="\n".join(body) + "\n",
        )
        index = end + 1


def shell_blocks(root: Path = REPO_ROOT) -> list[Block]:
    """Every shell block of the documentation."""
    return [
        block
        for path in documents(root)
        for block in blocks(path, root)
        if block.language in SHELL_LANGUAGES
    ]
