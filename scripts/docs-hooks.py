"""MkDocs hooks: the repository's root documents become pages of the documentation site.

README.md is the site's home page; SECURITY.md, CONTRIBUTING.md and LICENSE are pages of their
own. They stay at the top of the repository, where GitHub and the package index show them,
and are written once. Their links are written for the repository (`docs/how-to/clients.md`,
`SECURITY.md`), so every link of every page is rewritten here to the page the site has for it:
a link into `docs/` loses the prefix, a link to a root document names its page. A link that
leaves both is left alone, and `mkdocs build --strict` then refuses it.

The rewriting is pure (`site_link`, `rewrite_links`), so tests/unit/test_docs.py checks it
without MkDocs; only the two hook functions touch MkDocs' objects.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

__all__ = ["ROOT_PAGES", "on_files", "on_page_markdown", "rewrite_links", "site_link"]

REPOSITORY: Final = Path(__file__).resolve().parents[1]

# Each root document and the page the site makes of it.
ROOT_PAGES: Final = {
    "README.md": "index.md",
    "SECURITY.md": "security.md",
    "CONTRIBUTING.md": "contributing.md",
    "LICENSE": "license.md",
}
_DOCS: Final = "docs/"

# An inline link's target: `](target)` or `](target "title")`. Reference definitions are not
# used in these documents.
_LINK: Final = re.compile(r"\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_EXTERNAL: Final = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def site_link(target: str, source: str, page: str) -> str:
    """Return the link a page of the site needs for a link written in the repository.

    Args:
        target: The link as written, relative to its document's place in the repository.
        source: The document's path in the repository (`README.md`, `docs/how-to/nix.md`).
        page: The page's path in the site (`index.md`, `how-to/nix.md`).

    Returns:
        The rewritten link, or `target` unchanged when it is absolute, an anchor, or points
        outside both `docs/` and the root documents.
    """
    if _EXTERNAL.match(target):
        return target
    path, hash_, anchor = target.partition("#")
    in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if in_repository in ROOT_PAGES:
        in_site = ROOT_PAGES[in_repository]
    elif in_repository.startswith(_DOCS):
        in_site = in_repository.removeprefix(_DOCS)
    else:
        return target
    relative = posixpath.relpath(in_site, posixpath.dirname(page) or ".")
    return relative + hash_ + anchor


def rewrite_links(markdown: str, source: str, page: str) -> str:
    """Rewrite every inline link of a document with `site_link`."""

    def replace(match: re.Match[str]) -> str:
        link = site_link(match["target"], source, page)
        return f"]({link}{match['title'] or ''})"

    return _LINK.sub(replace, markdown)


def _root_document(name: str) -> str:
    text = (REPOSITORY / name).read_text(encoding="utf-8")
    if name.endswith(".md"):
        return text
    # The licence is plain text: shown as it is written.
    return f"# License\n\n```text\n{text}```\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the root documents to the site's files."""
    from mkdocs.structure.files import File  # noqa: PLC0415  # Only MkDocs runs the hooks.

    for name, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, content=_root_document(name)))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    """Rewrite the page's links from the repository's layout to the site's."""
    in_site = page.file.src_uri
    by_page = {site: root for root, site in ROOT_PAGES.items()}
    source = by_page.get(in_site, _DOCS + in_site)
    return rewrite_links(markdown, source, in_site)
