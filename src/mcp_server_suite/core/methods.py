"""What both protocol eras share: reading params, the tool methods, and shaping replies.

Rules:

1. `tools/list` and `tools/call` mean the same in every revision. An era module checks its
   own lifecycle and envelope first, then hands the request to `list_tools` or `call_tool`
   here with the revision it answers; only that revision decides what the result holds.
2. Every result leaves through `complete`, which adds what the revision requires of every
   result: from 2026-07-28 on, `resultType` and the server's identity in `_meta`.
3. Params are read from untrusted JSON: a member of the wrong type is named in the error
   (`invalid_params`), never repeated, because its value is the caller's text.
4. The `tools/call` envelope is closed, because it carries untrusted tool input: a member
   the revision does not define is refused, so an argument placed beside `arguments`
   instead of inside it fails loudly. Members the revision defines but this server does not
   act on (`task` for a server without the tasks capability, the multi round-trip
   `inputResponses` and `requestState` of a server that never asks for input) are accepted
   and ignored, as the specification requires of such a server.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NoReturn, Protocol

from mcp_server_suite import SERVER_NAME, SERVER_TITLE
from mcp_server_suite.core.actions import ClientInfo, Send, StartCall
from mcp_server_suite.core.jsonrpc import JSONValue, Request
from mcp_server_suite.core.registry import TOOL_ANNOTATIONS, RegisteredTool, ToolRegistry
from mcp_server_suite.core.versions import ProtocolRevision
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import InvalidParams, RequestId
from mcp_server_suite.schemas.problems import JSONRPCCode, MCPErrorCode, Problem

__all__ = [
    "CACHE_SCOPE",
    "CACHE_TTL_MS",
    "INSTRUCTIONS",
    "LEGACY_CALL_MEMBERS",
    "MODERN_CALL_MEMBERS",
    "SERVER_DESCRIPTION",
    "SERVER_INFO_KEY",
    "Host",
    "ServerIdentity",
    "call_failed_result",
    "call_succeeded_result",
    "call_tool",
    "closing_error",
    "complete",
    "error",
    "invalid",
    "list_tools",
    "object_params",
    "result",
]

SERVER_DESCRIPTION: Final = (
    "Read-only access to one PostgreSQL database, one directory tree and host metrics, "
    "behind strict validation."
)
INSTRUCTIONS: Final = (
    "Every tool only reads. sql_schema lists the tables and columns read_only_sql may "
    "query; read_only_sql runs one SELECT (a row cap is applied for you). sandbox_fs_list "
    "lists a directory and sandbox_fs_read reads a text file, both by path relative to the "
    "sandbox root (a large file is read in pieces with offset); system_metrics reports CPU, "
    "memory and disk use. A refused call returns an RFC 9457 problem document whose detail "
    "says what to change."
)

# Where a 2026-07-28 result names the server that produced it.
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"

# The tool list, and the discovery result, never change while the process runs (the tools
# are fixed at start-up, `listChanged: false`), and a stdio client's cache dies with the
# process. An hour bounds how stale a client that keeps its cache across a restart with a new
# configuration can be, and spares the others a refetch.
CACHE_TTL_MS: Final = 3_600_000

# Neither result depends on who asks: every caller of this process gets the same answer.
CACHE_SCOPE: Final = "public"

# Tool names are echoed in errors; 64 characters cover every registered name.
_ECHO_TOOL_NAME_CHARS: Final = 64

# The members each era's `CallToolRequestParams` defines (rule 4): 2025-11-25 added `task`,
# 2026-07-28 the multi round-trip members.
LEGACY_CALL_MEMBERS: Final = frozenset({"name", "arguments", "_meta", "task"})
MODERN_CALL_MEMBERS: Final = LEGACY_CALL_MEMBERS | {"inputResponses", "requestState"}


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """Who the server says it is, shaped to each revision's `Implementation`."""

    version: str

    def implementation(self, revision: ProtocolRevision) -> dict[str, JSONValue]:
        """The `Implementation` object of `revision`: name and version, and what it adds."""
        info: dict[str, JSONValue] = {"name": SERVER_NAME, "version": self.version}
        if revision.titles:
            info["title"] = SERVER_TITLE
        if revision.implementation_details:
            info["description"] = SERVER_DESCRIPTION
        return info


class Host(Protocol):
    """What an era module may use of the dispatcher that holds the session's state."""

    @property
    def registry(self) -> ToolRegistry:
        """The tools this session serves."""

    @property
    def identity(self) -> ServerIdentity:
        """The server's identity."""

    def start_call(
        self,
        request_id: RequestId,
        tool: RegisteredTool,
        arguments: Mapping[str, JSONValue],
        client: ClientInfo | None,
        revision: ProtocolRevision,
    ) -> StartCall:
        """Reserve the id and start the call; its reply is shaped to `revision`."""


def result(request_id: RequestId, body: Mapping[str, JSONValue]) -> Send:
    """A result response."""
    return Send({"jsonrpc": "2.0", "id": request_id, "result": body})


def error(request_id: RequestId | None, body: Mapping[str, JSONValue]) -> Send:
    """An error response; a null id when the request's id could not be read."""
    return Send({"jsonrpc": "2.0", "id": request_id, "error": body})


def complete(
    body: dict[str, JSONValue],
    revision: ProtocolRevision,
    identity: ServerIdentity,
    meta: Mapping[str, JSONValue] | None = None,
) -> dict[str, JSONValue]:
    """Add to a result what `revision` requires of every result (rule 2).

    Args:
        body: The method's own result members; changed in place.
        revision: The revision the result answers.
        identity: The server's identity, for the result's `_meta`.
        meta: Other members of the result's `_meta` (a subscription's id), from 2026-07-28.

    Returns:
        `body`.
    """
    if revision.result_type:
        body["resultType"] = "complete"
        body["_meta"] = {**(meta or {}), SERVER_INFO_KEY: identity.implementation(revision)}
    return body


def closing_error(request_id: RequestId) -> Send:
    """The answer to a request that arrives while the server shuts down."""
    return error(
        request_id,
        {
            "code": int(JSONRPCCode.INTERNAL_ERROR),
            "message": "The server is shutting down",
            "data": Problem.of(
                MCPErrorCode.INTERNAL_ERROR,
                "The server is shutting down and accepts no new requests.",
                metadata={"retryable": True},
            ).as_dict(),
        },
    )


def object_params(request: Request, allowed: frozenset[str] | None) -> Mapping[str, JSONValue]:
    """The request's params as an object, with only the `allowed` members (any when None).

    The dispatcher has already refused array params, so params are an object or absent.

    Raises:
        InvalidParams: A member outside `allowed` is present.
    """
    params: Mapping[str, JSONValue] = request.params or {}  # type: ignore[assignment]
    if allowed is not None and params.keys() - allowed:
        # An unknown member is the caller's text, so it is reported as a fault of `params`
        # rather than repeated.
        invalid(request, ("params",))
    return params


def invalid(request: Request, fields: tuple[str, ...]) -> NoReturn:
    """Refuse the request's params, naming the members at fault.

    Raises:
        InvalidParams: Always.
    """
    raise InvalidParams(
        f"Invalid params for {request.method}: check {', '.join(fields)}",
        request_id=request.id,
        invalid_params=fields,
    )


def list_tools(host: Host, request: Request, revision: ProtocolRevision) -> Send:
    """Answer `tools/list`: every tool, shaped to `revision`, in one page.

    Members other than `cursor` are accepted: the schema leaves the params open, and a
    listing has nothing to act on in them.

    Raises:
        InvalidParams: `_meta` is not an object, or a cursor was sent (none is ever issued).
    """
    params = object_params(request, None)
    if not isinstance(params.get("_meta", {}), dict):
        invalid(request, ("_meta",))
    if "cursor" in params:
        # The whole list fits one page, so no cursor was ever issued.
        raise InvalidParams(
            "Invalid cursor: the tool list has a single page; list again without a cursor",
            request_id=request.id,
            invalid_params=("cursor",),
            code=MCPErrorCode.INVALID_CURSOR,
        )
    body: dict[str, JSONValue] = {
        "tools": [_describe(tool, revision) for tool in host.registry.values()]
    }
    if revision.cache_hints:
        body["ttlMs"] = CACHE_TTL_MS
        body["cacheScope"] = CACHE_SCOPE
    return result(request.id, complete(body, revision, host.identity))


def call_tool(
    host: Host,
    request: Request,
    revision: ProtocolRevision,
    client: ClientInfo | None,
    allowed: frozenset[str],
) -> StartCall:
    """Check a `tools/call` envelope and the tool's name, then start the call.

    Args:
        host: The dispatcher.
        request: The `tools/call` request.
        revision: The revision its reply answers.
        client: Who the client says it is.
        allowed: The members the revision's envelope defines (rule 4).

    Returns:
        The call for the shell to run.

    Raises:
        InvalidParams: The envelope is malformed, or no tool has that name.
    """
    params = object_params(request, allowed)
    name = params.get("name")
    arguments = params.get("arguments", {})
    faults = tuple(
        field
        for field, ok in (
            ("name", isinstance(name, str)),
            ("arguments", isinstance(arguments, dict)),
            ("_meta", isinstance(params.get("_meta", {}), dict)),
        )
        if not ok
    )
    if faults:
        invalid(request, faults)
    tool = host.registry.get(str(name))
    if tool is None:
        message = f"Unknown tool: {quote(str(name), _ECHO_TOOL_NAME_CHARS)}"
        raise InvalidParams(message, request_id=request.id, invalid_params=("name",))
    return host.start_call(request.id, tool, arguments, client, revision)


def call_succeeded_result(
    structured: Mapping[str, JSONValue], text: str, revision: ProtocolRevision
) -> dict[str, JSONValue]:
    """The `CallToolResult` of a call whose result passed its output contract."""
    body: dict[str, JSONValue] = {
        "content": [{"type": "text", "text": text}],
        "isError": False,
    }
    if revision.structured_content:
        body["structuredContent"] = dict(structured)
    return body


def call_failed_result(problem: Problem) -> dict[str, JSONValue]:
    """The `CallToolResult` of a call refused or failed in-band: one problem document."""
    return {"content": [{"type": "text", "text": problem.as_text()}], "isError": True}


def _describe(tool: RegisteredTool, revision: ProtocolRevision) -> dict[str, JSONValue]:
    described = tool.description
    entry: dict[str, JSONValue] = {"name": described.name}
    if revision.titles:
        entry["title"] = described.title
    entry["description"] = described.description
    entry["inputSchema"] = described.input_schema
    if revision.structured_content:
        entry["outputSchema"] = described.output_schema
    if revision.tool_annotations:
        entry["annotations"] = {"title": described.title, **TOOL_ANNOTATIONS}
    return entry
