"""The modern era's lifecycle: stateless requests that each carry their version (2026-07-28).

Rules:

1. There is no handshake. Every request carries, in `params._meta`,
   `io.modelcontextprotocol/protocolVersion` (a string) and
   `io.modelcontextprotocol/clientCapabilities` (an object); `clientInfo` (an
   `Implementation`) and `logLevel` (a `LoggingLevel`) are optional and checked when present.
   A missing or malformed member is `-32602`, naming it.
2. A version the server does not serve statelessly is `-32022`, with `data.supported` (what
   the client may retry with: every supported version while the session's era is still
   open, only the modern ones once it is pinned) and `data.requested`. A legacy version sent
   this way is refused too: those are reached through `initialize`.
3. The methods are `server/discover`, `tools/list`, `tools/call` and `subscriptions/listen`.
   `initialize` and `ping` do not exist in 2026-07-28, so a request for them that carries
   the modern `_meta` is `-32601`, like any other unknown method. Envelope checks come
   first, as the specification requires of every request.
4. `server/discover` never pins the session's era: a client may probe and then fall back to
   `initialize`. Any other request with a valid envelope pins the session to this era.
5. `subscriptions/listen` is acknowledged with `notifications/subscriptions/acknowledged`
   carrying the subset of the filter the server honours, which is empty: the tool list
   never changes (`listChanged: false`) and there are no prompts or resources. The request
   stays open until the client cancels it (no response, as for any cancelled request) or
   the session closes (a result naming the subscription).
6. `logLevel` is accepted and never acted on: the server logs to stderr and sends no
   `notifications/message`, which the revision allows.

The dispatcher holds the session's state; this module decides what the era's rules make of
each request and tells the dispatcher through `ModernHost`.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NoReturn, Protocol, TypeAlias

from mcp_server_suite.core.actions import Action, ClientInfo, Send
from mcp_server_suite.core.jsonrpc import JSONValue, Request
from mcp_server_suite.core.methods import (
    CACHE_SCOPE,
    CACHE_TTL_MS,
    INSTRUCTIONS,
    MODERN_CALL_MEMBERS,
    Host,
    call_tool,
    complete,
    error,
    invalid,
    list_tools,
    object_params,
    result,
)
from mcp_server_suite.core.versions import (
    MODERN_VERSIONS,
    SUPPORTED_VERSIONS,
    ProtocolRevision,
    modern_revision,
)
from mcp_server_suite.schemas.errors import (
    InvalidParams,
    MethodNotFound,
    RequestId,
    UnsupportedVersion,
)
from mcp_server_suite.schemas.problems import JSONRPCCode, MCPErrorCode, Problem

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "LOG_LEVEL_KEY",
    "MAX_SUBSCRIPTIONS",
    "METHODS",
    "PROTOCOL_VERSION_KEY",
    "SUBSCRIPTION_ID_KEY",
    "Envelope",
    "ModernHost",
    "claims_modern_era",
    "closing_result",
    "handle",
    "refuse_handshake",
]

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"

# The schema's `LoggingLevel`, the syslog severities of RFC 5424.
_LOG_LEVELS: Final = frozenset(
    {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
)

# A client needs one subscription per kind of notification (four kinds exist); sixteen leave
# room for a client that re-subscribes before cancelling, and keep what an idle session holds
# (one id each, and one closing result each at shutdown) small.
MAX_SUBSCRIPTIONS: Final = 16

# Versions are ten-character dates; an unsupported one is echoed in `data.requested` cut to
# this length, which holds any future scheme, so the echo stays bounded.
_MAX_VERSION_ECHO_CHARS: Final = 64

_SUBSCRIPTION_FLAGS: Final = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a valid request's `_meta` establishes: its revision, and who sent it."""

    revision: ProtocolRevision
    client: ClientInfo | None


class ModernHost(Host, Protocol):
    """The dispatcher, as the modern era sees it."""

    @property
    def era_pinned(self) -> bool:
        """Whether the session's era is already decided (and is this one)."""

    def pin_modern_era(self) -> None:
        """Record that the session speaks this era from now on."""

    @property
    def open_subscriptions(self) -> int:
        """How many `subscriptions/listen` requests are open."""

    def open_subscription(self, request_id: RequestId, revision: ProtocolRevision) -> None:
        """Hold a `subscriptions/listen` request open until it is cancelled or closed."""


_Handler: TypeAlias = Callable[[ModernHost, Request, Envelope], Action]


def claims_modern_era(params: JSONValue) -> bool:
    """Whether a request's params carry the modern `_meta` (its protocol-version member).

    The member's name is reserved by MCP and exists only in 2026-07-28 requests, so a legacy
    request never carries it (a legacy `_meta` holds, for example, a `progressToken`). The
    member alone decides, so a half-built envelope is treated as modern and told what it
    lacks.
    """
    if not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def handle(host: ModernHost, request: Request) -> Action:
    """Serve one request of the modern era (or one that opens it).

    Args:
        host: The dispatcher.
        request: A request whose params are an object or absent.

    Returns:
        The action for the shell.

    Raises:
        ProtocolError: The envelope is missing or malformed, the version is not served, the
            method does not exist, or its params are invalid (each a subclass with its own
            code).
    """
    envelope = read_envelope(host, request)
    if request.method != "server/discover":
        host.pin_modern_era()
    handler = METHODS.get(request.method)
    if handler is None:
        raise MethodNotFound("Method not found", request_id=request.id)
    return handler(host, request, envelope)


def read_envelope(host: ModernHost, request: Request) -> Envelope:
    """Check a request's `_meta` (rules 1 and 2) and return what it establishes.

    Raises:
        InvalidParams: `_meta` is missing, or a member is missing or malformed.
        UnsupportedVersion: The version is one the server does not serve statelessly.
    """
    params = object_params(request, None)
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise InvalidParams(
            f"Invalid params for {request.method}: 2026-07-28 requests carry _meta with "
            f"{PROTOCOL_VERSION_KEY} and {CLIENT_CAPABILITIES_KEY}",
            request_id=request.id,
            invalid_params=("_meta",),
        )
    version = meta.get(PROTOCOL_VERSION_KEY)
    info = meta.get(CLIENT_INFO_KEY)
    level = meta.get(LOG_LEVEL_KEY, "info")
    faults = tuple(
        key
        for key, ok in (
            (PROTOCOL_VERSION_KEY, isinstance(version, str)),
            (CLIENT_CAPABILITIES_KEY, isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict)),
            (CLIENT_INFO_KEY, CLIENT_INFO_KEY not in meta or _is_implementation(info)),
            # A string first: a container is not hashable, so it cannot be looked up.
            (LOG_LEVEL_KEY, isinstance(level, str) and level in _LOG_LEVELS),
        )
        if not ok
    )
    if faults or not isinstance(version, str):
        # The second test only narrows the type: a version that is not a string is a fault.
        raise InvalidParams(
            f"Invalid params for {request.method}: _meta needs a valid {', '.join(faults)}",
            request_id=request.id,
            invalid_params=faults,
        )
    revision = modern_revision(version)
    if revision is None:
        raise UnsupportedVersion(
            version[:_MAX_VERSION_ECHO_CHARS], supported_versions(host), request_id=request.id
        )
    client = ClientInfo.of(info["name"], info["version"]) if isinstance(info, dict) else None
    return Envelope(revision, client)


def supported_versions(host: ModernHost) -> tuple[str, ...]:
    """The versions this session can still be spoken in, as discovery and `-32022` list them.

    Every supported version while the era is open (a client reaches the legacy ones through
    `initialize`, as the specification's own example of `-32022` lists them), only the modern
    ones once a request has pinned the session to this era. Both answers name the same set,
    so a client that reads one never retries with a version the other would refuse.
    """
    return MODERN_VERSIONS if host.era_pinned else SUPPORTED_VERSIONS


def refuse_handshake(request: Request) -> NoReturn:
    """Answer an `initialize` sent to a session that already speaks this era.

    The client is told the versions it can still use, as the specification asks of any
    error answering `initialize`; it must not fall back once the era is settled.

    Raises:
        UnsupportedVersion: Always.
    """
    params = request.params if isinstance(request.params, dict) else {}
    requested = params.get("protocolVersion")
    raise UnsupportedVersion(
        requested[:_MAX_VERSION_ECHO_CHARS] if isinstance(requested, str) else "",
        MODERN_VERSIONS,
        request_id=request.id,
        message="This session speaks 2026-07-28, which has no initialize: "
        "send each request with its _meta instead",
    )


def closing_result(host: Host, request_id: RequestId, revision: ProtocolRevision) -> Send:
    """The result that ends an open subscription when the session closes (rule 5)."""
    body = complete({}, revision, host.identity, meta={SUBSCRIPTION_ID_KEY: request_id})
    return result(request_id, body)


def _discover(host: ModernHost, request: Request, envelope: Envelope) -> Action:
    body: dict[str, JSONValue] = {
        "supportedVersions": list(supported_versions(host)),
        "capabilities": {"tools": {"listChanged": False}},
        "instructions": INSTRUCTIONS,
        "ttlMs": CACHE_TTL_MS,
        "cacheScope": CACHE_SCOPE,
    }
    return result(request.id, complete(body, envelope.revision, host.identity))


def _tools_list(host: ModernHost, request: Request, envelope: Envelope) -> Action:
    return list_tools(host, request, envelope.revision)


def _tools_call(host: ModernHost, request: Request, envelope: Envelope) -> Action:
    return call_tool(host, request, envelope.revision, envelope.client, MODERN_CALL_MEMBERS)


def _listen(host: ModernHost, request: Request, envelope: Envelope) -> Action:
    params = object_params(request, None)
    wanted = params.get("notifications")
    if not isinstance(wanted, dict) or not _is_filter(wanted):
        invalid(request, ("notifications",))
    if host.open_subscriptions >= MAX_SUBSCRIPTIONS:
        return error(
            request.id,
            {
                "code": int(JSONRPCCode.INTERNAL_ERROR),
                "message": "Subscription limit reached",
                "data": Problem.of(
                    MCPErrorCode.INTERNAL_ERROR,
                    f"At most {MAX_SUBSCRIPTIONS} subscriptions may be open at once; "
                    "cancel one before opening another.",
                    metadata={"max_subscriptions": MAX_SUBSCRIPTIONS},
                ).as_dict(),
            },
        )
    host.open_subscription(request.id, envelope.revision)
    return Send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            # Nothing requested is honoured (rule 5), so the honoured filter is empty.
            "params": {"_meta": {SUBSCRIPTION_ID_KEY: request.id}, "notifications": {}},
        }
    )


def _is_implementation(value: JSONValue) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("version"), str)
    )


def _is_filter(wanted: Mapping[str, JSONValue]) -> bool:
    # The schema's `SubscriptionFilter`: three flags and a list of resource URIs, all optional.
    flags_ok = all(isinstance(wanted.get(flag, False), bool) for flag in _SUBSCRIPTION_FLAGS)
    uris = wanted.get("resourceSubscriptions", [])
    return flags_ok and isinstance(uris, list) and all(isinstance(uri, str) for uri in uris)


METHODS: Final[Mapping[str, _Handler]] = MappingProxyType(
    {
        "server/discover": _discover,
        "tools/list": _tools_list,
        "tools/call": _tools_call,
        "subscriptions/listen": _listen,
    }
)
