"""What the dispatcher tells the shell to do, whichever protocol era a session speaks.

Rules:

1. An action is plain data: the shell carries it out and never looks inside a message.
2. `Send` carries a complete JSON-RPC message (a response, or a notification the protocol
   asks for); `StartCall` is a validated `tools/call` the shell runs as its own task;
   `CancelCall` names a call to cancel without answering it. `None` means nothing to do.
3. What the client says about itself is recorded, bounded, and never trusted.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from mcp_server_suite.core.jsonrpc import JSONValue
from mcp_server_suite.core.registry import RegisteredTool
from mcp_server_suite.core.versions import ProtocolRevision
from mcp_server_suite.schemas.errors import RequestId

__all__ = [
    "MAX_CLIENT_INFO_CHARS",
    "Action",
    "CancelCall",
    "ClientInfo",
    "Send",
    "StartCall",
]

# A client's name and version are recorded with every call it makes; 256 characters hold any
# real product name and version string while keeping one record bounded.
MAX_CLIENT_INFO_CHARS: Final = 256


@dataclass(frozen=True, slots=True)
class Send:
    """Write this message to the client.

    `revision` is the revision a call's reply is shaped to, so that the dispatcher can
    replace the reply with a refusal of the same shape (`Dispatcher.reply_withheld`); None
    for every other message.
    """

    message: Mapping[str, JSONValue]
    revision: ProtocolRevision | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who the client says it is: recorded with its calls, never trusted.

    The legacy era reads it from `initialize`'s `clientInfo`, the modern era from each
    request's `_meta["io.modelcontextprotocol/clientInfo"]`. Both members are the client's
    own text, cut to `MAX_CLIENT_INFO_CHARS`; whoever writes them anywhere must still escape
    them.
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
