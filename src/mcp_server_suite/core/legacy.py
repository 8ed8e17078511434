"""The legacy era's lifecycle: a session opened by `initialize` (2024-11-05 to 2025-11-25).

Rules:

1. `initialize` opens the session, once. It negotiates the revision (`versions.negotiate`:
   a supported legacy version is echoed, any other string is answered with the latest), and
   every result of the session is shaped to that revision.
2. Before `initialize` only `initialize` and `ping` are served; every other known method is
   refused with `-32600`. An unknown method is `-32601` at any time, at once, so a client
   that probes with a method this era lacks learns so without waiting.
3. Requests are served from the moment `initialize` is answered, before
   `notifications/initialized`, as the lifecycle allows; the notification needs no action.
4. `initialize`'s params are open on purpose: a newer client's extra members must not break
   the handshake, or it could never learn which version the server offers instead. What is
   read (`protocolVersion`, `capabilities`, `clientInfo`) must have the schema's type.

The dispatcher holds the session's state; this module decides what the era's rules make of
each request and tells the dispatcher through `LegacyHost`.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Protocol, TypeAlias

from mcp_server_suite.core.actions import Action, ClientInfo
from mcp_server_suite.core.jsonrpc import JSONValue, Request
from mcp_server_suite.core.methods import (
    INSTRUCTIONS,
    LEGACY_CALL_MEMBERS,
    Host,
    call_tool,
    invalid,
    list_tools,
    object_params,
    result,
)
from mcp_server_suite.core.versions import ProtocolRevision, negotiate
from mcp_server_suite.schemas.errors import MethodNotFound, ProtocolError

__all__ = ["METHODS", "LegacyHost", "handle"]


class LegacyHost(Host, Protocol):
    """The dispatcher, as the legacy era sees it."""

    @property
    def revision(self) -> ProtocolRevision | None:
        """The negotiated revision; None before `initialize` has been answered."""

    @property
    def client(self) -> ClientInfo | None:
        """The `clientInfo` of `initialize`, once it has been answered."""

    def open_legacy_session(self, revision: ProtocolRevision, client: ClientInfo) -> None:
        """Record a successful `initialize`: requests are served from now on."""


_Handler: TypeAlias = Callable[[LegacyHost, Request], Action]


@dataclass(frozen=True, slots=True)
class _Method:
    handler: _Handler
    before_init: bool


def handle(host: LegacyHost, request: Request) -> Action:
    """Serve one request of a legacy session.

    Args:
        host: The dispatcher.
        request: A request whose params are an object or absent.

    Returns:
        The action for the shell.

    Raises:
        ProtocolError: The request breaks the era's lifecycle, its params are invalid, or the
            method is unknown (each a subclass with its own code).
    """
    method = METHODS.get(request.method)
    if method is None:
        raise MethodNotFound("Method not found", request_id=request.id)
    if host.revision is None and not method.before_init:
        raise ProtocolError(
            "Invalid request: send initialize before this method", request_id=request.id
        )
    return method.handler(host, request)


def _initialize(host: LegacyHost, request: Request) -> Action:
    if host.revision is not None:
        raise ProtocolError(
            "Invalid request: initialize may be sent only once", request_id=request.id
        )
    version, client = _initialize_params(request)
    revision = negotiate(version)
    host.open_legacy_session(revision, client)
    return result(
        request.id,
        {
            "protocolVersion": revision.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": host.identity.implementation(revision),
            "instructions": INSTRUCTIONS,
        },
    )


def _ping(host: LegacyHost, request: Request) -> Action:
    return result(request.id, {})


def _tools_list(host: LegacyHost, request: Request) -> Action:
    return list_tools(host, request, _negotiated(host))


def _tools_call(host: LegacyHost, request: Request) -> Action:
    return call_tool(host, request, _negotiated(host), host.client, LEGACY_CALL_MEMBERS)


def _negotiated(host: LegacyHost) -> ProtocolRevision:
    # `handle` serves these methods only once a revision has been negotiated.
    revision = host.revision
    if revision is None:  # pragma: no cover - guarded by the lifecycle check in `handle`
        raise RuntimeError("no negotiated revision")
    return revision


def _initialize_params(request: Request) -> tuple[str, ClientInfo]:
    params: Mapping[str, JSONValue] = object_params(request, None)
    version = params.get("protocolVersion")
    info = params.get("clientInfo")
    faults = tuple(
        name
        for name, ok in (
            # Any string: one the server does not know is answered with the latest (rule 1).
            ("protocolVersion", isinstance(version, str)),
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
        invalid(request, faults or ("clientInfo",))
    return str(version), ClientInfo.of(str(info["name"]), str(info["version"]))


METHODS: Final = MappingProxyType(
    {
        "initialize": _Method(_initialize, before_init=True),
        "ping": _Method(_ping, before_init=True),
        "tools/list": _Method(_tools_list, before_init=False),
        "tools/call": _Method(_tools_call, before_init=False),
    }
)
