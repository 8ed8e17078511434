"""The shell's first phase: the opening of a session, answered with plain blocking I/O.

Rules:

1. While the session is opening (no era chosen yet, or a legacy session before
   `initialize`), frames are served before anything else has loaded: nothing can run
   concurrently yet (`server/discover`, `initialize` and `ping` are answered inline, and calls
   are refused before `initialize`), so a client's handshake or discovery is answered before
   the guardrails or asyncio have even been imported.
2. The phase ends when the session is ready for calls, or at the first call, which it hands
   over unstarted (`core.stdio.Handover`); frames after it stay buffered in the framer.
3. A stop signal, the end of input or a client gone ends the session (exit 0), even while
   a read or a write is blocked, and so does a descriptor that fails (`core.stdio`, rules 3
   and 4).

Imported at start-up: it needs nothing but the protocol core and `core.stdio`.
"""

from __future__ import annotations

from typing import Final

from mcp_server_suite.core.framing import NEED_DATA, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import Dispatcher, Send, SessionState, StartCall
from mcp_server_suite.core.stdio import (
    Handover,
    Stopped,
    StopSignals,
    read_input,
    write_all,
)

__all__ = ["answer_handshake"]

# The states this phase serves: before them nothing can be in flight.
_OPENING_STATES: Final = frozenset({SessionState.OPENING, SessionState.AWAITING_INIT})


def answer_handshake(
    dispatcher: Dispatcher,
    framer: LineFramer,
    stop: StopSignals,
    *,
    in_fd: int,
    out_fd: int,
) -> Handover | None:
    """Serve frames with blocking I/O while the session is opening.

    Args:
        dispatcher: The session's protocol state machine, still opening.
        framer: The session's framer; frames after the phase stay buffered in it.
        stop: The stop-signal handlers installed at start-up.
        in_fd: The descriptor requests arrive on.
        out_fd: The descriptor responses go to.

    Returns:
        A `Handover` when the next phase should continue the session; None when input
        ended, the client went away or a stop signal arrived first (exit 0).
    """
    try:
        while not stop.count:
            if dispatcher.state not in _OPENING_STATES:
                return Handover()
            frame = framer.next_frame()
            if frame is NEED_DATA:
                if framer.at_eof:
                    return None
                with stop.interrupting():
                    chunk = read_input(in_fd)
                if chunk:
                    framer.receive_data(chunk)
                else:
                    framer.receive_eof()
                continue
            action = dispatcher.handle_frame(frame)
            if isinstance(action, StartCall):
                return Handover(action)
            # Nothing is in flight yet, so a cancellation has nothing to cancel.
            if isinstance(action, Send):
                with stop.interrupting():
                    write_all(out_fd, encode(action.message))
    except (Stopped, ConnectionError):
        return None
    return None
