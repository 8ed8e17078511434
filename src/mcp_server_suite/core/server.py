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
from typing import Final, NoReturn, TypeAlias

from mcp_server_suite import SERVER_NAME, SERVER_TITLE
from mcp_server_suite.core.framing import FrameTooLarge
from mcp_server_suite.core.jsonrpc import (
    JSONValue,
    Notification,
    Request,
    Response,
    parse_message,
)
from mcp_server_suite.core.registry import TOOL_ANNOTATIONS, RegisteredTool, ToolRegistry
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
    "MAX_CLIENT_INFO_CHARS",
    "Action",
    "CancelCall",
    "ClientInfo",
    "Dispatcher",
    "Send",
    "SessionState",
    "StartCall",
]

# Tool names are echoed in errors; 64 characters cover every registered name.
_ECHO_TOOL_NAME_CHARS: Final = 64

# Protocol versions are ten-character dates; 64 leaves room for any future scheme.
_MAX_VERSION_CHARS: Final = 64

# A client's name and version are recorded with every call it makes; 256 characters hold any
# real product name and version string while keeping one record bounded.
MAX_CLIENT_INFO_CHARS: Final = 256

_CALL_MEMBERS: Final = frozenset({"name", "arguments", "_meta"})
_LIST_MEMBERS: Final = frozenset({"cursor", "_meta"})

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
class ClientInfo:
    """Who the client says it is (`clientInfo`): recorded with its calls, never trusted.

    Both members are the client's own text, cut to `MAX_CLIENT_INFO_CHARS`; whoever writes them
    anywhere must still escape them.
    """

    name: str
    version: str

    @classmethod
    def of(cls, name: str, version: str) -> "ClientInfo":
        """Build the record from the client's text, bounded."""
        return cls(name[:MAX_CLIENT_INFO_CHARS], version[:MAX_CLIENT_INFO_CHARS])


@dataclass(frozen=True, slots=True)
class StartCall:
    """Run a validated `tools/call` envelope through the guardrails as its own task.

    `client` is what the client said about itself, when it said anything.
    """

    request_id: RequestId
    tool: RegisteredTool
    arguments: Mapping[str, JSONValue]
    client: ClientInfo | None = None


@dataclass(frozen=True, slots=True)
class CancelCall:
    """Cancel the in-flight call with this id; nothing is sent for it."""

    request_id: RequestId


# None means "nothing to do" (a notification, a client response, framing noise).
Action: TypeAlias = Send | StartCall | CancelCall | None


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
        self._client: ClientInfo | None = None
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
    def client(self) -> ClientInfo | None:
        """The `clientInfo` of the `initialize` request, once it has been answered."""
        return self._client

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
        version, client = _initialize_params(request)
        revision = negotiate(version)
        self._revision = revision
        self._client = client
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
        if _list_cursor(request) is not None:
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
        name, arguments = _call_envelope(request)
        tool = self._registry.get(name)
        if tool is None:
            message = f"Unknown tool: {quote(name, _ECHO_TOOL_NAME_CHARS)}"
            raise InvalidParams(message, request_id=request.id, invalid_params=("name",))
        self._in_flight.add(request.id)
        return StartCall(request.id, tool, arguments, self._client)

    def _describe(self, name: str, revision: ProtocolRevision) -> dict[str, JSONValue]:
        described = self._registry[name].description
        tool: dict[str, JSONValue] = {"name": described.name}
        if revision.titles:
            tool["title"] = described.title
        tool["description"] = described.description
        tool["inputSchema"] = described.input_schema
        if revision.structured_content:
            tool["outputSchema"] = described.output_schema
        if revision.tool_annotations:
            tool["annotations"] = {"title": described.title, **TOOL_ANNOTATIONS}
        return tool

    def _notification(self, notification: Notification) -> Action:
        if notification.method != "notifications/cancelled":
            # notifications/initialized needs no action: requests are served from the moment
            # initialize is answered, as the lifecycle allows. Unknown ones are ignored.
            return None
        request_id = _cancelled_id(notification.params)
        if request_id is not None and request_id in self._in_flight:
            # The id stays reserved until the task reports back through call_abandoned.
            return CancelCall(request_id)
        # Unknown, finished or never-started ids (initialize included) are ignored.
        return None


def _object_params(request: Request, allowed: frozenset[str] | None) -> Mapping[str, JSONValue]:
    # `_request` has already refused array params, so params are an object or absent.
    params: Mapping[str, JSONValue] = request.params or {}  # type: ignore[assignment]
    if allowed is not None and params.keys() - allowed:
        # An unknown member is the caller's text, so it is reported as a fault of
        # `params` rather than repeated.
        _invalid(request, ("params",))
    return params


def _invalid(request: Request, fields: tuple[str, ...]) -> NoReturn:
    raise InvalidParams(
        f"Invalid params for {request.method}: check {', '.join(fields)}",
        request_id=request.id,
        invalid_params=fields,
    )


def _initialize_params(request: Request) -> tuple[str, ClientInfo]:
    # Open on purpose: a newer client's extra members must not break the handshake, or it
    # could never learn which version the server offers instead.
    params = _object_params(request, None)
    version = params.get("protocolVersion")
    info = params.get("clientInfo")
    faults = tuple(
        name
        for name, ok in (
            ("protocolVersion", isinstance(version, str) and len(version) <= _MAX_VERSION_CHARS),
            ("capabilities", isinstance(params.get("capabilities"), dict)),
            (
                "clientInfo",
                isinstance(info, dict)
                and isinstance(info.get("name"), str)
                and isinstance(info.get("version"), str),
            ),
        )
        if not ok
    )
    if faults or not isinstance(info, dict):
        # The second test only narrows the type: a clientInfo that is not an object is a fault.
        _invalid(request, faults or ("clientInfo",))
    return str(version), ClientInfo.of(str(info["name"]), str(info["version"]))


def _call_envelope(request: Request) -> tuple[str, Mapping[str, JSONValue]]:
    # Closed on purpose: this is the envelope of untrusted tool input.
    params = _object_params(request, _CALL_MEMBERS)
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
        _invalid(request, faults)
    return str(name), arguments


def _list_cursor(request: Request) -> JSONValue:
    params = _object_params(request, _LIST_MEMBERS)
    if not isinstance(params.get("_meta", {}), dict):
        _invalid(request, ("_meta",))
    return params.get("cursor")


def _cancelled_id(params: JSONValue) -> RequestId | None:
    if not isinstance(params, dict):
        return None
    request_id = params.get("requestId")
    # `type(...) is int` on purpose: true is not an id.
    if type(request_id) is int or isinstance(request_id, str):
        return request_id
    return None


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
