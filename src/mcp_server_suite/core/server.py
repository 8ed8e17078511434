"""The dispatcher: the session's state machine, as a pure function of the frames it is fed.

Rules:

1. Everything that affects the session's state lives here: the lifecycle state, the
   negotiated revision, the calls in flight and the open subscriptions. The era modules
   (`legacy`, `modern`) decide what their rules make of a request and tell the dispatcher
   through a narrow interface; the shell only carries bytes and runs the calls it is told to
   start.
2. Fed any frame, `Dispatcher.handle_frame` returns an action and never raises: a frame
   that breaks the protocol becomes a `Send` of the matching JSON-RPC error.
3. The era is chosen by how the client opens, once. The first request other than
   `server/discover` decides: one that carries the modern `_meta` (and passes its checks)
   pins the session to 2026-07-28, any other opens a legacy session, which `initialize`
   then initializes. `server/discover` is answered before the era is chosen and does not
   choose it, so a client may probe and still fall back to `initialize`; a discovery
   without the modern `_meta` does not choose it either (it is a 2026-07-28 request
   missing its required fields, `-32602`). Afterwards a request of the other era is
   refused: `initialize` in a modern session with `-32022`
   naming the versions it can use, a request carrying the modern `_meta` in a legacy session
   with `-32600`.
4. Notifications never get a response, whatever they contain. Responses sent by the client
   are ignored, because the server sends no requests.
5. A request id may be in flight only once, a call and an open subscription alike. A
   `tools/call` is checked (envelope, arguments object, tool name) before any tool code
   runs; only then does it become a `StartCall` for the shell.
6. Every result is shaped by the revision it answers (see `versions`): a call's reply by the
   revision of the request that started it.

Calling order: `handle_frame` for each frame from the framer; for each `StartCall`, exactly
one of `call_succeeded`, `call_failed`, `call_crashed` or `call_abandoned` when it ends (and
`reply_withheld` on what it returned, when that must not be sent); at the end of the
session, `begin_closing`, then `close_subscriptions` for what to send last.
"""

from collections.abc import Mapping
from enum import Enum
from typing import Final

from mcp_server_suite.core import legacy, modern
from mcp_server_suite.core.actions import (
    MAX_CLIENT_INFO_CHARS,
    Action,
    CancelCall,
    ClientInfo,
    Send,
    StartCall,
)
from mcp_server_suite.core.framing import FrameTooLarge
from mcp_server_suite.core.jsonrpc import (
    JSONValue,
    Notification,
    Request,
    Response,
    parse_message,
)
from mcp_server_suite.core.methods import (
    ServerIdentity,
    call_failed_result,
    call_succeeded_result,
    closing_error,
    complete,
    error,
    result,
)
from mcp_server_suite.core.registry import RegisteredTool, ToolRegistry
from mcp_server_suite.core.versions import ProtocolRevision
from mcp_server_suite.schemas.errors import (
    InvalidParams,
    ProtocolError,
    RequestId,
    internal_error,
    to_wire,
)
from mcp_server_suite.schemas.problems import JSONRPCCode, Problem

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


class SessionState(Enum):
    """Where the session is in its lifecycle, the era included."""

    # No request has chosen the era yet; `server/discover` is answered meanwhile.
    OPENING = "opening"
    # A legacy session, before `initialize` has been answered.
    AWAITING_INIT = "awaiting-init"
    # A legacy session, initialized.
    READY = "ready"
    # A 2026-07-28 session: every request carries its own version.
    STATELESS = "stateless"
    # Shutting down: new requests are refused, calls in flight run to their end.
    CLOSING = "closing"


_LEGACY_STATES: Final = frozenset({SessionState.AWAITING_INIT, SessionState.READY})

_MODERN_IN_LEGACY_SESSION: Final = (
    "Invalid request: this session opened in the handshake era (initialize); requests "
    f"carrying {modern.PROTOCOL_VERSION_KEY} belong to 2026-07-28 and are not accepted in it"
)


class Dispatcher:
    """The protocol state machine of one session.

    Args:
        registry: The tools this session serves.
        server_version: The version reported in the server's identity.
    """

    def __init__(self, registry: ToolRegistry, *, server_version: str) -> None:
        self._registry: Final = registry
        self._identity: Final = ServerIdentity(server_version)
        self._state = SessionState.OPENING
        self._revision: ProtocolRevision | None = None
        self._client: ClientInfo | None = None
        # The revision each call's reply answers, by request id.
        self._in_flight: dict[RequestId, ProtocolRevision] = {}
        self._subscriptions: dict[RequestId, ProtocolRevision] = {}

    @property
    def state(self) -> SessionState:
        """The lifecycle state."""
        return self._state

    @property
    def registry(self) -> ToolRegistry:
        """The tools this session serves."""
        return self._registry

    @property
    def identity(self) -> ServerIdentity:
        """The server's identity."""
        return self._identity

    @property
    def revision(self) -> ProtocolRevision | None:
        """The legacy revision `initialize` negotiated; None before it, and in 2026-07-28."""
        return self._revision

    @property
    def client(self) -> ClientInfo | None:
        """The `clientInfo` of the `initialize` request, once it has been answered."""
        return self._client

    @property
    def in_flight(self) -> frozenset[RequestId]:
        """Ids of the calls started and not yet finished."""
        return frozenset(self._in_flight)

    @property
    def subscriptions(self) -> frozenset[RequestId]:
        """Ids of the `subscriptions/listen` requests held open."""
        return frozenset(self._subscriptions)

    def handle_frame(self, frame: bytes | FrameTooLarge) -> Action:
        """Decide what one frame from the client calls for.

        Args:
            frame: A frame from `LineFramer`, or its report of an over-long line.

        Returns:
            The action for the shell. Never raises.
        """
        if isinstance(frame, FrameTooLarge):
            return error(
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
            return error(exc.request_id, to_wire(exc))

    def begin_closing(self) -> None:
        """Refuse new requests from now on; calls in flight run to their end."""
        self._state = SessionState.CLOSING

    def close_subscriptions(self) -> list[Send]:
        """End every open subscription: the results that tell the client they ended."""
        closing = [
            modern.closing_result(self, request_id, revision)
            for request_id, revision in self._subscriptions.items()
        ]
        self._subscriptions.clear()
        return closing

    def call_succeeded(
        self, request_id: RequestId, structured: Mapping[str, JSONValue], text: str
    ) -> Send:
        """Answer a call whose tool returned a result that passed its output contract.

        Args:
            request_id: The call's id.
            structured: The result as JSON data.
            text: The same result as JSON text.

        Returns:
            The `CallToolResult` response, shaped to the call's revision.
        """
        revision = self._finish(request_id)
        body = call_succeeded_result(structured, text, revision)
        return _reply(result(request_id, complete(body, revision, self._identity)), revision)

    def call_failed(self, request_id: RequestId, problem: Problem) -> Send:
        """Answer a call that was refused or failed in-band, with its problem document."""
        return self._refusal(request_id, problem, self._finish(request_id))

    def call_crashed(self, request_id: RequestId, correlation_id: str) -> Send:
        """Answer a call whose tool failed unexpectedly: `-32603` and a correlation id only."""
        revision = self._finish(request_id)
        return _reply(error(request_id, internal_error(correlation_id)), revision)

    def reply_withheld(self, reply: Send, problem: Problem) -> Send:
        """Replace a call's decided reply, which must not be sent, with an in-band refusal.

        Args:
            reply: What `call_succeeded`, `call_failed` or `call_crashed` returned.
            problem: Why the reply is withheld.

        Returns:
            The refusal, shaped to the call's revision like the reply it replaces.

        Raises:
            ValueError: `reply` is not a call's reply.
        """
        request_id = reply.message["id"]
        if reply.revision is None or not isinstance(request_id, str | int):
            raise ValueError("only a call's reply can be withheld")
        return self._refusal(request_id, problem, reply.revision)

    def _refusal(self, request_id: RequestId, problem: Problem, revision: ProtocolRevision) -> Send:
        body = complete(call_failed_result(problem), revision, self._identity)
        return _reply(result(request_id, body), revision)

    def call_abandoned(self, request_id: RequestId) -> None:
        """Forget a call that was cancelled; a cancelled request gets no response."""
        self._in_flight.pop(request_id, None)

    # The interface the era modules use (`legacy.LegacyHost`, `modern.ModernHost`).

    def start_call(
        self,
        request_id: RequestId,
        tool: RegisteredTool,
        arguments: Mapping[str, JSONValue],
        client: ClientInfo | None,
        revision: ProtocolRevision,
    ) -> StartCall:
        """Reserve the id and start the call; its reply is shaped to `revision`."""
        self._in_flight[request_id] = revision
        return StartCall(request_id, tool, arguments, client)

    def open_legacy_session(self, revision: ProtocolRevision, client: ClientInfo) -> None:
        """Record a successful `initialize`: requests are served from now on."""
        self._revision = revision
        self._client = client
        self._state = SessionState.READY

    @property
    def era_pinned(self) -> bool:
        """Whether the session already speaks 2026-07-28."""
        return self._state is SessionState.STATELESS

    def pin_modern_era(self) -> None:
        """Record that the session speaks 2026-07-28 from now on."""
        self._state = SessionState.STATELESS

    @property
    def open_subscriptions(self) -> int:
        """How many `subscriptions/listen` requests are open."""
        return len(self._subscriptions)

    def open_subscription(self, request_id: RequestId, revision: ProtocolRevision) -> None:
        """Hold a `subscriptions/listen` request open until it is cancelled or closed."""
        self._subscriptions[request_id] = revision

    def _finish(self, request_id: RequestId) -> ProtocolRevision:
        revision = self._in_flight.pop(request_id, None)
        if revision is None:
            raise RuntimeError("no call with this id is in flight")
        return revision

    def _request(self, request: Request) -> Action:
        if request.id in self._in_flight or request.id in self._subscriptions:
            raise ProtocolError(
                "Invalid request: this id is already in flight", request_id=request.id
            )
        if self._state is SessionState.CLOSING:
            return closing_error(request.id)
        if request.params is not None and not isinstance(request.params, dict):
            raise InvalidParams(
                "params must be an object", request_id=request.id, invalid_params=("params",)
            )
        claims_modern = modern.claims_modern_era(request.params)
        if self._state in _LEGACY_STATES:
            if claims_modern:
                raise ProtocolError(_MODERN_IN_LEGACY_SESSION, request_id=request.id)
            return legacy.handle(self, request)
        if self._state is SessionState.STATELESS:
            if not claims_modern and request.method == "initialize":
                modern.refuse_handshake(request)
            return modern.handle(self, request)
        # The session is opening (rule 3).
        if claims_modern or request.method == "server/discover":
            return modern.handle(self, request)
        self._state = SessionState.AWAITING_INIT
        return legacy.handle(self, request)

    def _notification(self, notification: Notification) -> Action:
        if notification.method != "notifications/cancelled":
            # notifications/initialized needs no action: requests are served from the moment
            # initialize is answered, as the lifecycle allows. Unknown ones are ignored.
            return None
        request_id = _cancelled_id(notification.params)
        if request_id is None:
            return None
        if request_id in self._in_flight:
            # The id stays reserved until the task reports back through call_abandoned.
            return CancelCall(request_id)
        # A cancelled subscription ends without a response, like any cancelled request.
        self._subscriptions.pop(request_id, None)
        # Unknown, finished or never-started ids (initialize included) are ignored.
        return None


def _cancelled_id(params: JSONValue) -> RequestId | None:
    if not isinstance(params, dict):
        return None
    request_id = params.get("requestId")
    # `type(...) is int` on purpose: true is not an id, and neither is 7.0.
    if type(request_id) is int or isinstance(request_id, str):
        return request_id
    return None


def _reply(send: Send, revision: ProtocolRevision) -> Send:
    # A call's reply keeps its revision, for `Dispatcher.reply_withheld`.
    return Send(send.message, revision)
