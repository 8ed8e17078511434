"""The RFC 9457 problem taxonomy: one row per `MCPErrorCode`, checked against itself.

Rules:

1. Every problem the server emits is built from a row of `PROBLEM_TYPES`; the `type` URI, the
   `title`, the HTTP `status` and the JSON-RPC code of a row travel together and a `Problem`
   whose members disagree with its row cannot be constructed.
2. A row is a problem type in RFC 9457's sense: its `title` summarises every occurrence of
   that type and never changes between them, so a problem that needs a different title is a
   different type, with a row of its own. What is particular to one occurrence goes in
   `detail`.
3. A problem's `detail` is written by the server from the caller's own values; it never
   carries exception text, a traceback or a host path.
4. The JSON text of an in-band problem uses the standard library's default separators, so the
   document a client reads is byte-for-byte what the design document shows.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Final, Self, TypeAlias

__all__ = [
    "MAX_DETAIL_CHARS",
    "PROBLEM_TYPES",
    "JSONRPCCode",
    "MCPErrorCode",
    "MetadataValue",
    "Problem",
    "ProblemType",
]


class JSONRPCCode(IntEnum):
    """JSON-RPC 2.0 error codes, plus the server-defined range this server uses."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    # Implementation-defined server errors (-32000 to -32019 by the MCP allocation policy).
    ACCESS_DENIED = -32001
    QUERY_VIOLATION = -32002
    EXECUTION_TIMEOUT = -32003
    # Defined by MCP 2026-07-28 (-32020 to -32099 are reserved for the specification).
    UNSUPPORTED_PROTOCOL_VERSION = -32022


class MCPErrorCode(StrEnum):
    """The machine-readable code carried by every problem document."""

    VALIDATION_ERROR = "MCP_VALIDATION_ERROR"
    INVALID_PARAMS = "MCP_INVALID_PARAMS"
    INVALID_CURSOR = "MCP_INVALID_CURSOR"
    ACCESS_DENIED = "MCP_ACCESS_DENIED"
    QUERY_VIOLATION = "MCP_QUERY_VIOLATION"
    EXECUTION_TIMEOUT = "MCP_EXECUTION_TIMEOUT"
    INTERNAL_ERROR = "MCP_INTERNAL_ERROR"


@dataclass(frozen=True, slots=True)
class ProblemType:
    """One row of the error table: what a code means on every channel."""

    uri: str
    title: str
    status: int
    jsonrpc_code: JSONRPCCode


_URN = "urn:mcp-server-suite:problem:"

PROBLEM_TYPES: Final = MappingProxyType(
    {
        # What a tool was asked to do cannot be done as asked: its arguments break the schema
        # or the sanitizer, or name something that is not there (a missing file, bad SQL).
        MCPErrorCode.VALIDATION_ERROR: ProblemType(
            f"{_URN}validation-error", "Invalid tool arguments", 422, JSONRPCCode.INVALID_PARAMS
        ),
        # The params of a protocol method are malformed before any tool is involved: an
        # `initialize` without capabilities, a `tools/call` envelope that is not an object,
        # an unknown tool, a missing `_meta` member, text that is not I-JSON.
        MCPErrorCode.INVALID_PARAMS: ProblemType(
            f"{_URN}invalid-params", "Invalid request parameters", 400, JSONRPCCode.INVALID_PARAMS
        ),
        # A `tools/list` cursor the server never issued (the list has a single page).
        MCPErrorCode.INVALID_CURSOR: ProblemType(
            f"{_URN}invalid-cursor", "Invalid pagination cursor", 400, JSONRPCCode.INVALID_PARAMS
        ),
        MCPErrorCode.ACCESS_DENIED: ProblemType(
            f"{_URN}access-denied",
            "Access to the requested resource is denied",
            403,
            JSONRPCCode.ACCESS_DENIED,
        ),
        MCPErrorCode.QUERY_VIOLATION: ProblemType(
            f"{_URN}query-violation",
            "The query violates the read-only policy",
            403,
            JSONRPCCode.QUERY_VIOLATION,
        ),
        MCPErrorCode.EXECUTION_TIMEOUT: ProblemType(
            f"{_URN}execution-timeout",
            "The tool did not finish in time",
            504,
            JSONRPCCode.EXECUTION_TIMEOUT,
        ),
        MCPErrorCode.INTERNAL_ERROR: ProblemType(
            f"{_URN}internal-error", "Internal server error", 500, JSONRPCCode.INTERNAL_ERROR
        ),
    }
)

# Metadata values are scalars so a problem document stays flat and trivially JSON.
MetadataValue: TypeAlias = str | int | float | bool | None
_SCALARS: Final = (str, int, float, bool, type(None))

# A problem's detail is one readable sentence; 1,024 characters leave room for the 256
# characters of echoed caller input that the tools allow, several times over.
MAX_DETAIL_CHARS: Final = 1024


@dataclass(frozen=True, slots=True)
class Problem:
    """An RFC 9457 problem document, consistent with its `MCPErrorCode` row.

    A plain frozen dataclass rather than a Pydantic model: problems are built by the server
    itself on every refusal, including before the session's first tool call, and the checks
    below are all the validation they need.

    Raises:
        ValueError: On construction, when a member disagrees with the code's row, the detail
            is longer than `MAX_DETAIL_CHARS`, or a metadata value is not a scalar.
    """

    type: str
    title: str
    status: int
    detail: str
    code: MCPErrorCode
    invalid_params: tuple[str, ...] = ()
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        row = PROBLEM_TYPES[MCPErrorCode(self.code)]
        if (self.type, self.title, self.status) != (row.uri, row.title, row.status):
            raise ValueError(f"problem members disagree with the {self.code} row")
        if len(self.detail) > MAX_DETAIL_CHARS:
            raise ValueError(f"problem detail is longer than {MAX_DETAIL_CHARS} characters")
        if not all(isinstance(value, _SCALARS) for value in self.metadata.values()):
            raise ValueError("problem metadata values must be JSON scalars")
        # Frozen: the mapping is copied into a read-only view, so no holder can change it.
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @classmethod
    def of(
        cls,
        code: MCPErrorCode,
        detail: str,
        *,
        invalid_params: tuple[str, ...] = (),
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> Self:
        """Build the problem for `code` from its table row.

        Args:
            code: The error code; selects `type`, `title` and `status`.
            detail: One sentence about this occurrence, written by the server; cut to
                `MAX_DETAIL_CHARS` if longer.
            invalid_params: Names of the arguments the caller should correct.
            metadata: Flat, machine-readable facts (for example `retryable`).

        Returns:
            The problem document.
        """
        row = PROBLEM_TYPES[code]
        if len(detail) > MAX_DETAIL_CHARS:
            detail = detail[: MAX_DETAIL_CHARS - 3] + "..."
        return cls(
            type=row.uri,
            title=row.title,
            status=row.status,
            detail=detail,
            code=code,
            invalid_params=invalid_params,
            metadata=metadata or {},
        )

    @property
    def jsonrpc_code(self) -> JSONRPCCode:
        """The JSON-RPC code used when this problem travels as `error.data`."""
        return PROBLEM_TYPES[self.code].jsonrpc_code

    def as_dict(self) -> dict[str, object]:
        """Return the document as plain JSON data, members in the documented order."""
        return {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code.value,
            "invalid_params": list(self.invalid_params),
            "metadata": dict(self.metadata),
        }

    def as_text(self) -> str:
        """Return the document as the JSON text of an in-band error block."""
        return json.dumps(self.as_dict())
