"""Protocol revisions: what each supported MCP version allows a result to contain.

Rules:

1. A result is shaped by the revision it answers: a member that revision's schema lacks is
   not sent, and a member it requires always is. Each revision is one row of feature flags,
   so shaping code asks "does this revision have output schemas?" and never compares
   version strings.
2. Every revision belongs to an era. Legacy revisions (2025-11-25 and earlier) open a
   session with `initialize`, and negotiation follows their lifecycle: a requested legacy
   revision is echoed, any other request is answered with the latest legacy revision, and
   the client decides whether to continue. Modern revisions (2026-07-28 on) carry the
   version in every request's `_meta`, and a version the server does not serve is refused,
   never replaced.
3. The two eras never borrow each other's versions: `negotiate` offers only legacy
   revisions, and `modern_revision` accepts only modern ones.
"""

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

__all__ = [
    "LATEST",
    "LATEST_LEGACY",
    "MODERN_VERSIONS",
    "REVISIONS",
    "SUPPORTED_VERSIONS",
    "Era",
    "ProtocolRevision",
    "modern_revision",
    "negotiate",
]


class Era(Enum):
    """How a revision establishes its version: by handshake, or on every request."""

    LEGACY = "legacy"
    MODERN = "modern"


@dataclass(frozen=True, slots=True)
class ProtocolRevision:
    """One MCP revision and the optional result members its schema defines.

    Attributes:
        version: The revision's date string.
        era: How the version is established.
        tool_annotations: `Tool.annotations` exists (2025-03-26 on).
        titles: `Tool.title` and `Implementation.title` exist (2025-06-18 on).
        structured_content: `Tool.outputSchema` and `CallToolResult.structuredContent`
            exist (2025-06-18 on).
        implementation_details: `Implementation.description` and `websiteUrl` exist
            (2025-11-25 on).
        result_type: Every result carries `resultType` and names the server in its
            `_meta` (`io.modelcontextprotocol/serverInfo`) (2026-07-28 on).
        cache_hints: List and discovery results carry `ttlMs` and `cacheScope`
            (2026-07-28 on).
    """

    version: str
    era: Era
    tool_annotations: bool
    titles: bool
    structured_content: bool
    implementation_details: bool
    result_type: bool
    cache_hints: bool


_REVISIONS: Final = (
    ProtocolRevision("2026-07-28", Era.MODERN, True, True, True, True, True, True),
    ProtocolRevision("2025-11-25", Era.LEGACY, True, True, True, True, False, False),
    ProtocolRevision("2025-06-18", Era.LEGACY, True, True, True, False, False, False),
    ProtocolRevision("2025-03-26", Era.LEGACY, True, False, False, False, False, False),
    ProtocolRevision("2024-11-05", Era.LEGACY, False, False, False, False, False, False),
)

REVISIONS: Final = MappingProxyType({revision.version: revision for revision in _REVISIONS})

# Newest first, as a client reading an error would want them.
SUPPORTED_VERSIONS: Final = tuple(revision.version for revision in _REVISIONS)

MODERN_VERSIONS: Final = tuple(
    revision.version for revision in _REVISIONS if revision.era is Era.MODERN
)

LATEST_LEGACY: Final = next(revision for revision in _REVISIONS if revision.era is Era.LEGACY)

# The revision `initialize` offers when the client asks for one the server does not have.
LATEST: Final = LATEST_LEGACY


def negotiate(requested: str) -> ProtocolRevision:
    """Choose the revision to answer an `initialize` that asked for `requested`.

    Args:
        requested: The client's `protocolVersion`.

    Returns:
        The requested revision when it is a supported legacy revision, else the latest
        legacy revision.
    """
    revision = REVISIONS.get(requested)
    if revision is None or revision.era is not Era.LEGACY:
        return LATEST_LEGACY
    return revision


def modern_revision(requested: str) -> ProtocolRevision | None:
    """Look up the revision a modern request names in its `_meta`.

    Args:
        requested: The request's `io.modelcontextprotocol/protocolVersion`.

    Returns:
        The revision when it is a modern revision this server serves, else None (the
        request is answered with the unsupported-version error).
    """
    revision = REVISIONS.get(requested)
    if revision is None or revision.era is not Era.MODERN:
        return None
    return revision
