"""Protocol revisions: what each supported MCP version allows a result to contain.

Rules:

1. A result is shaped by the revision it answers: a member that revision's schema lacks is
   not sent. Each revision is one row of feature flags, so shaping code asks "does this
   revision have output schemas?" and never compares version strings.
2. Negotiation follows the MCP lifecycle: a requested version the server supports is
   echoed; any other request is answered with the latest supported version, and the client
   decides whether to continue.
3. Every revision belongs to an era. Legacy revisions open a session with `initialize`;
   the modern, stateless era (2026-07-28 onwards) carries the version in each request's
   `_meta`. Only the legacy era is served today; a modern row added here, with its own
   flags (for example `result_type`), is all the shaping code needs to answer it.
"""

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

__all__ = [
    "LATEST",
    "REVISIONS",
    "SUPPORTED_VERSIONS",
    "Era",
    "ProtocolRevision",
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
    """

    version: str
    era: Era
    tool_annotations: bool
    titles: bool
    structured_content: bool
    implementation_details: bool


_REVISIONS: Final = (
    ProtocolRevision("2025-11-25", Era.LEGACY, True, True, True, True),
    ProtocolRevision("2025-06-18", Era.LEGACY, True, True, True, False),
    ProtocolRevision("2025-03-26", Era.LEGACY, True, False, False, False),
    ProtocolRevision("2024-11-05", Era.LEGACY, False, False, False, False),
)

REVISIONS: Final = MappingProxyType({revision.version: revision for revision in _REVISIONS})

# Newest first, as a client reading an error would want them.
SUPPORTED_VERSIONS: Final = tuple(revision.version for revision in _REVISIONS)

LATEST: Final = _REVISIONS[0]


def negotiate(requested: str) -> ProtocolRevision:
    """Choose the revision to answer an `initialize` that asked for `requested`.

    Args:
        requested: The client's `protocolVersion`.

    Returns:
        The requested revision when it is a supported legacy revision, else the latest.
    """
    revision = REVISIONS.get(requested)
    if revision is None or revision.era is not Era.LEGACY:
        return LATEST
    return revision
