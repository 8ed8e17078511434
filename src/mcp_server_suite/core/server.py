"""The dispatcher: the session's state machine, as a pure function of the frames it is fed.

Rules:

1. Everything that affects the session's state lives here: the lifecycle state, the
   negotiated revision and the set of in-flight request ids. The shell only carries bytes
   and runs the calls this module tells it to start.
2. Fed any frame, `Dispatcher.handle_frame` returns an action and never raises: a frame
   that breaks the protocol becomes a `Send` of the matching JSON-RPC error.
3. `initialize` and `ping` are accepted before the handshake; every other known request is
   refused until `initialize` has been answered. An unknown method is `-32601` at any
   time, at once: newer clients probe with methods such as `server/discover` and wait for
   the answer before they fall back to `initialize`.
4. Notifications never get a response, whatever they contain. Responses sent by the client
   are ignored, because the server sends no requests.
5. A request id may be in flight only once. A `tools/call` is checked here (envelope,
   arguments object, tool name) before any tool code runs; only then does it become a
   `StartCall` for the shell.
6. Every result is shaped by the revision it answers (see `versions`).

Calling order: `handle_frame` for each frame from the framer; for each `StartCall`, exactly
one of `call_succeeded`, `call_failed`, `call_crashed` or `call_abandoned` when it ends.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Final, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server_suite import SERVER_NAME, SERVER_TITLE
from mcp_server_suite.core.framing import FrameTooLarge
from mcp_server_suite.core.jsonrpc import (
    JSONValue,
    Notification,
    Request,
    Response,
    parse_message,
)
from mcp_server_suite.core.registry import TOOL_ANNOTATIONS, ToolRegistry, ToolSpec
from mcp_server_suite.core.versions import ProtocolRevision, negotiate
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import (
    InvalidParams,
    MethodNotFound,
    ProtocolError,
    RequestId,
    internal_error,
    to_wire,
)
from mcp_server_suite.schemas.problems import JSONRPCCode, MCPErrorCode, Problem

__all__ = [
    "Action",
    "CancelCall",
    "Dispatcher",
    "Send",
    "SessionState",
    "StartCall",
]

# Tool names are echoed in errors; 64 characters cover every registered name.
_ECHO_TOOL_NAME_CHARS: Final = 64

SERVER_DESCRIPTION: Final = (
    "Read-only access to one PostgreSQL database, one directory tree and host metrics, "
    "behind strict validation."
)
INSTRUCTIONS: Final = (
    "Every tool only reads. read_only_sql runs one SELECT (a row cap is applied for you); "
    "sandbox_fs_read reads text files by path relative to the sandbox root; "
    "system_metrics reports CPU, memory and disk use. A refused call returns an RFC 9457 "
    "problem document whose detail says what to change."
)


class SessionState(Enum):
    """Where the session is in its lifecycle."""

    AWAITING_INIT = "awaiting-init"
    READY = "ready"
    CLOSING = "closing"


@dataclass(frozen=True, slots=True)
class Send:
    """Write this message to the client."""

    message: Mapping[str, JSONValue]


@dataclass(frozen=True, slots=True)
class StartCall:
    """Run a validated `tools/call` envelope through the guardrails as its own task."""

    request_id: RequestId
    spec: ToolSpec[Any, Any]
    arguments: Mapping[str, JSONValue]


@dataclass(frozen=True, slots=True)
class CancelCall:
    """Cancel the in-flight call with this id; nothing is sent for it."""

    request_id: RequestId


# None means "nothing to do" (a notification, a client response, framing noise).
Action: TypeAlias = Send | StartCall | CancelCall | None


class _ClientInfo(BaseModel):
    # Clients add members in newer revisions; only the two this server reads are checked.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    name: str
    version: str


class _InitializeParams(BaseModel):
    # Forward compatible on purpose: a newer client's extra members must not break the
    # handshake, or it could never learn which version the server offers instead.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True, populate_by_name=True)

    protocol_version: str = Field(alias="protocolVersion", max_length=64)
    capabilities: dict[str, JSONValue]
    client_info: _ClientInfo = Field(alias="clientInfo")


class _CallToolParams(BaseModel):
    # Closed on purpose: this is the envelope of untrusted tool input.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    meta: dict[str, JSONValue] | None = Field(default=None, alias="_meta")


class _ListToolsParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    cursor: str | None = None
    meta: dict[str, JSONValue] | None = Field(default=None, alias="_meta")


class _CancelledParams(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True, populate_by_name=True)

    request_id: str | int = Field(alias="requestId")


ModelT = TypeVar("ModelT", bound=BaseModel)

_Handler: TypeAlias = Callable[["Dispatcher", Request], Action]


@dataclass(frozen=True, slots=True)
class _Method:
    handler: _Handler
    before_init: bool


class Dispatcher:
    """The protocol state machine of one session.

    Args:
        registry: The tools this session serves.
        server_version: The version reported in `serverInfo`.
    """

    def __init__(self, registry: ToolRegistry, *, server_version: str) -> None:
        self._registry: Final = registry
        self._server_version: Final = server_version
        self._state = SessionState.AWAITING_INIT
        self._revision: ProtocolRevision | None = None
        self._in_flight: set[RequestId] = set()

    @property
    def state(self) -> SessionState:
        """The lifecycle state."""
        return self._state

    @property
    def revision(self) -> ProtocolRevision | None:
        """The negotiated revision, once `initialize` has been answered."""
        return self._revision

    @property
    def in_flight(self) -> frozenset[RequestId]:
        """Ids of the calls started and not yet finished."""
        return frozenset(self._in_flight)

    def handle_frame(self, frame: bytes | FrameTooLarge) -> Action:
        """Decide what one frame from the client calls for.

        Args:
            frame: A frame from `LineFramer`, or its report of an over-long line.

        Returns:
            The action for the shell. Never raises.
        """
        if isinstance(frame, FrameTooLarge):
            return _error(
                None,
                {
                    "code": int(JSONRPCCode.INVALID_REQUEST),
                    "message": "Invalid request: the message exceeds the frame limit",
                    "data": {"max_frame_bytes": frame.max_frame_bytes},
                },
            )
        try:
            message = parse_message(frame)
            if isinstance(message, Response):
                return None
            if isinstance(message, Notification):
                return self._notification(message)
            return self._request(message)
        except ProtocolError as exc:
            return _error(exc.request_id, to_wire(exc))

    def begin_closing(self) -> None:
        """Refuse new requests from now on; calls in flight run to their end."""
        self._state = SessionState.CLOSING

    def call_succeeded(
        self, request_id: RequestId, structured: Mapping[str, JSONValue], text: str
    ) -> Send:
        """Answer a call whose tool returned a result that passed its output contract.

        Args:
            request_id: The call's id.
            structured: The result as JSON data.
            text: The same result as JSON text.

        Returns:
            The `CallToolResult` response, shaped to the negotiated revision.
        """
        self._in_flight.discard(request_id)
        result: dict[str, JSONValue] = {
            "content": [{"type": "text", "text": text}],
            "isError": False,
        }
        if self._answering.structured_content:
            result["structuredContent"] = dict(structured)
        return _result(request_id, result)

    def call_failed(self, request_id: RequestId, problem: Problem) -> Send:
        """Answer a call that was refused or failed in-band, with its problem document."""
        self._in_flight.discard(request_id)
        return _result(
            request_id,
            {"content": [{"type": "text", "text": problem.as_text()}], "isError": True},
        )

    def call_crashed(self, request_id: RequestId, correlation_id: str) -> Send:
        """Answer a call whose tool failed unexpectedly: `-32603` and a correlation id only."""
        self._in_flight.discard(request_id)
        return _error(request_id, internal_error(correlation_id))

    def call_abandoned(self, request_id: RequestId) -> None:
        """Forget a call that was cancelled; a cancelled request gets no response."""
        self._in_flight.discard(request_id)

    @property
    def _answering(self) -> ProtocolRevision:
        # Calls start only after initialize, so a revision is always set when they finish.
        if self._revision is None:  # pragma: no cover - guarded by the lifecycle check
            raise RuntimeError("no negotiated revision")
        return self._revision

    def _request(self, request: Request) -> Action:
        method = _METHODS.get(request.method)
        if method is None:
            raise MethodNotFound("Method not found", request_id=request.id)
        if request.id in self._in_flight:
            raise ProtocolError(
                "Invalid request: this id is already in flight", request_id=request.id
            )
        if self._state is SessionState.CLOSING:
            return _error(
                request.id,
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
        if self._state is SessionState.AWAITING_INIT and not method.before_init:
            raise ProtocolError(
                "Invalid request: send initialize before this method", request_id=request.id
            )
        if request.params is not None and not isinstance(request.params, dict):
            raise InvalidParams(
                "params must be an object", request_id=request.id, invalid_params=("params",)
            )
        return method.handler(self, request)

    def _initialize(self, request: Request) -> Action:
        if self._state is not SessionState.AWAITING_INIT:
            raise ProtocolError(
                "Invalid request: initialize may be sent only once", request_id=request.id
            )
        params = _validate(_InitializeParams, request)
        revision = negotiate(params.protocol_version)
        self._revision = revision
        self._state = SessionState.READY
        server_info: dict[str, JSONValue] = {"name": SERVER_NAME, "version": self._server_version}
        if revision.titles:
            server_info["title"] = SERVER_TITLE
        if revision.implementation_details:
            server_info["description"] = SERVER_DESCRIPTION
        return _result(
            request.id,
            {
                "protocolVersion": revision.version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": server_info,
                "instructions": INSTRUCTIONS,
            },
        )

    def _ping(self, request: Request) -> Action:
        return _result(request.id, {})

    def _tools_list(self, request: Request) -> Action:
        params = _validate(_ListToolsParams, request)
        if params.cursor is not None:
            # The whole list fits one page, so no cursor was ever issued.
            raise InvalidParams(
                "Invalid cursor: the tool list has a single page",
                request_id=request.id,
                invalid_params=("cursor",),
            )
        revision = self._answering
        return _result(
            request.id,
            {"tools": [self._describe(name, revision) for name in self._registry]},
        )

    def _tools_call(self, request: Request) -> Action:
        params = _validate(_CallToolParams, request)
        spec = self._registry.get(params.name)
        if spec is None:
            message = f"Unknown tool: {quote(params.name, _ECHO_TOOL_NAME_CHARS)}"
            raise InvalidParams(message, request_id=request.id, invalid_params=("name",))
        self._in_flight.add(request.id)
        return StartCall(request.id, spec, params.arguments)

    def _describe(self, name: str, revision: ProtocolRevision) -> dict[str, JSONValue]:
        spec = self._registry[name]
        input_schema, output_schema = self._registry.schemas(name)
        tool: dict[str, JSONValue] = {"name": spec.name}
        if revision.titles:
            tool["title"] = spec.title
        tool["description"] = spec.description
        tool["inputSchema"] = input_schema
        if revision.structured_content:
            tool["outputSchema"] = output_schema
        if revision.tool_annotations:
            tool["annotations"] = {"title": spec.title, **TOOL_ANNOTATIONS}
        return tool

    def _notification(self, notification: Notification) -> Action:
        if notification.method != "notifications/cancelled":
            # notifications/initialized needs no action: requests are served from the moment
            # initialize is answered, as the lifecycle allows. Unknown ones are ignored.
            return None
        try:
            params = _CancelledParams.model_validate(notification.params)
        except ValidationError:
            return None
        if params.request_id in self._in_flight:
            # The id stays reserved until the task reports back through call_abandoned.
            return CancelCall(params.request_id)
        # Unknown, finished or never-started ids (initialize included) are ignored.
        return None


def _validate(model: type[ModelT], request: Request) -> ModelT:
    try:
        return model.model_validate(request.params or {})
    except ValidationError as exc:
        # Only the model's own member names are echoed; an unknown member is the caller's
        # text, so it is reported as a fault of `params` rather than repeated.
        known = {field.alias or name for name, field in model.model_fields.items()}
        fields = tuple(
            dict.fromkeys(
                str(error["loc"][0]) if error["loc"] and error["loc"][0] in known else "params"
                for error in exc.errors(include_url=False, include_input=False)
            )
        )
        raise InvalidParams(
            f"Invalid params for {request.method}: check {', '.join(fields) or 'params'}",
            request_id=request.id,
            invalid_params=fields,
        ) from None


def _result(request_id: RequestId, result: Mapping[str, JSONValue]) -> Send:
    return Send({"jsonrpc": "2.0", "id": request_id, "result": result})


def _error(request_id: RequestId | None, error: Mapping[str, JSONValue]) -> Send:
    return Send({"jsonrpc": "2.0", "id": request_id, "error": error})


_METHODS: Final = MappingProxyType(
    {
        "initialize": _Method(Dispatcher._initialize, before_init=True),
        "ping": _Method(Dispatcher._ping, before_init=True),
        "tools/list": _Method(Dispatcher._tools_list, before_init=False),
        "tools/call": _Method(Dispatcher._tools_call, before_init=False),
    }
)
