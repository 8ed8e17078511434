"""The shell's second phase: a ready session served without an event loop, while it can be.

After the handshake, the session stays in blocking I/O for as long as every frame can be
answered at once: pings, `tools/list`, discovery, and calls a tool's shortcut answers
without waiting (a cached file read). The event loop starts only when it is needed.

Rules:

1. Only a call that can be answered at once is answered here: one whose tool has a
   shortcut (`ToolSpec.run_inline`) that takes it, through `Guardrails.answer_now`
   (`InlineCalls`). Any other call is handed over to the event loop, unstarted, exactly as
   the dispatcher started it.
2. A call answered here ends as it would on the event loop: the same reply for the same
   outcome (a refusal in-band, a crash as `-32603` with a correlation id), and one audit
   record, taken down after the reply is decided and before it is written; a reply the
   trail could not record is withheld.
3. Nothing here waits for a call: none is in flight while one is answered, so there is
   nothing to cancel, no deadline to keep and no output bound to wait for.
4. The answers to one read leave in one write (or every `INLINE_BATCH_BYTES`). Where the
   event loop would make the output non-blocking (pipes, sockets), so is it here, and a
   write never waits: what the client does not take at once is handed over. Elsewhere (a
   terminal, a regular file) writes block, as on the event loop, and a stop signal
   interrupts them.
5. The phase hands over (`core.stdio.Handover`) at the first call that needs the event loop
   (unstarted), at the first write the client does not take at once (the rest unwritten),
   or at the end when subscriptions are open (their closing results need the session's
   grace); otherwise the session ends here, on end of input, a signal or a client gone,
   a descriptor that fails included (`core.stdio`, rule 4).
6. Before a read may sleep, the records of the calls answered so far are written once they
   are due, and input is first looked for awake (`core.busy_poll`).
"""

from __future__ import annotations

import logging
import math
import os
import select
from typing import Final

from mcp_server_suite.audit.record import Crashed, Outcome, Refused, Succeeded
from mcp_server_suite.audit.trail import AuditTrail
from mcp_server_suite.core.busy_poll import ready_within
from mcp_server_suite.core.framing import NEED_DATA, LineFramer
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import CancelCall, Dispatcher, Send, StartCall
from mcp_server_suite.core.stdio import (
    Handover,
    Stopped,
    StopSignals,
    read_input,
    served_by_transports,
    write_all,
)
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import ToolFailure, new_correlation_id

__all__ = ["INLINE_BATCH_BYTES", "InlineCalls", "serve_inline"]

logger = logging.getLogger(__name__)

# The inline phase writes its answers once they reach this many bytes, even in the middle of
# a read: the asyncio session's piece size, so one read of small requests that each ask for a
# large answer never holds more than one piece and one answer.
INLINE_BATCH_BYTES: Final = 256 * 1024


class InlineCalls:
    """Answers calls at once, for the inline phase (rules 1 to 3).

    Args:
        dispatcher: The session's protocol state machine.
        guardrails: The limits every call passes.
        audit: Where each call is recorded.
    """

    def __init__(self, dispatcher: Dispatcher, guardrails: Guardrails, audit: AuditTrail) -> None:
        self._dispatcher = dispatcher
        self._guardrails = guardrails
        self.audit = audit

    def answer(self, action: StartCall) -> bytes | None:
        """The encoded reply to a call, or None when the call needs the event loop.

        Args:
            action: A call the dispatcher just started, while no other is in flight.

        Returns:
            The reply's frame, its record taken down (rule 2); None leaves the call
            unanswered and unrecorded, still in flight, for the event loop to start.
        """
        request_id = action.request_id
        dispatcher = self._dispatcher
        started = self.audit.clock()
        outcome: Outcome
        try:
            # The first call of a tool loads it, as on the event loop.
            output = self._guardrails.answer_now(action.tool.spec(), action.arguments)
            if output is None:
                return None
        except ToolFailure as failure:
            outcome = Refused(failure.problem.code)
            reply = dispatcher.call_failed(request_id, failure.problem)
        except Exception:
            correlation_id = new_correlation_id()
            logger.exception(
                "tool %s failed unexpectedly (correlation_id=%s)",
                action.tool.description.name,
                correlation_id,
            )
            outcome = Crashed(correlation_id)
            reply = dispatcher.call_crashed(request_id, correlation_id)
        else:
            outcome = Succeeded.of(output.structured, output.text)
            reply = dispatcher.call_succeeded(request_id, output.structured, output.text)
        if not self.audit.record(action, outcome, started, held=True):
            reply = dispatcher.reply_withheld(reply, self.audit.refusal)
        return encode(reply.message)


def serve_inline(
    calls: InlineCalls,
    dispatcher: Dispatcher,
    framer: LineFramer,
    stop: StopSignals,
    *,
    in_fd: int,
    out_fd: int,
    first_call: StartCall | None = None,
) -> Handover | None:
    """Serve the ready session with blocking reads while every frame is answered at once.

    Args:
        calls: Answers the calls that need no event loop, and records them.
        dispatcher: The session's protocol state machine, ready for calls.
        framer: The session's framer; frames after the phase stay buffered in it.
        stop: The stop-signal handlers installed at start-up.
        in_fd: The descriptor requests arrive on.
        out_fd: The descriptor responses go to.
        first_call: The call the handshake phase handed over, if any.

    Returns:
        A `Handover` when the event loop must continue the session (`core.session.serve`);
        None when it ended here.
    """
    return _InlinePhase(calls, dispatcher, framer, stop, in_fd=in_fd, out_fd=out_fd).run(first_call)


class _InlinePhase:
    """`serve_inline`'s loop and what it holds."""

    def __init__(
        self,
        calls: InlineCalls,
        dispatcher: Dispatcher,
        framer: LineFramer,
        stop: StopSignals,
        *,
        in_fd: int,
        out_fd: int,
    ) -> None:
        self._calls = calls
        self._dispatcher = dispatcher
        self._framer = framer
        self._stop = stop
        self._in_fd = in_fd
        self._replies = _Replies(out_fd, stop, nonblocking=served_by_transports(in_fd, out_fd))
        self._inputs = select.poll()
        self._inputs.register(in_fd, select.POLLIN)

    def run(self, first_call: StartCall | None) -> Handover | None:
        try:
            return self._serve(first_call)
        except Stopped:
            return self._ended()
        except ConnectionError:
            logger.info("the client went away")
            return None
        finally:
            self._calls.audit.write_waiting()

    def _serve(self, first_call: StartCall | None) -> Handover | None:
        framer, replies = self._framer, self._replies
        if first_call is not None and (handover := self._act(first_call)) is not None:
            return handover
        while not self._stop.count:
            frame = framer.next_frame()
            if frame is not NEED_DATA:
                handover = self._act(self._dispatcher.handle_frame(frame))
                if handover is not None:
                    return handover
                continue
            if not replies.write():
                return Handover(unsent=replies.unsent())
            if framer.at_eof:
                logger.info("end of input")
                break
            _write_records_unless_input(self._inputs, self._calls.audit, self._stop)
            with self._stop.interrupting():
                chunk = _read_chunk(self._in_fd, self._inputs)
            if chunk:
                framer.receive_data(chunk)
            else:
                framer.receive_eof()
        return self._ended()

    def _act(self, action: Send | StartCall | CancelCall | None) -> Handover | None:
        replies = self._replies
        if isinstance(action, Send):
            replies.add(encode(action.message))
        elif isinstance(action, StartCall):
            reply = self._calls.answer(action)
            if reply is None:
                # It needs the event loop: the answers before it leave first, from there.
                return Handover(action, replies.unsent())
            replies.add(reply)
        # A cancellation finds nothing in flight here: every call has been answered.
        if replies.size >= INLINE_BATCH_BYTES and not replies.write():
            return Handover(unsent=replies.unsent())
        return None

    def _ended(self) -> Handover | None:
        if self._dispatcher.subscriptions or self._replies.size:
            # Their closing results and what is left to write get the session's grace.
            return Handover(unsent=self._replies.unsent())
        if self._stop.last is not None:
            logger.warning(
                "received %s, nothing in flight: ending the session", self._stop.last.name
            )
        return None


class _Replies:
    """The inline phase's answers to one read, written together (rule 4).

    A blocking write (a terminal, a regular file, a pipe written beside a regular file's
    input) that a stop signal interrupts drops the rest, since the client that asked to stop
    was not reading it.
    """

    def __init__(self, fd: int, stop: StopSignals, *, nonblocking: bool) -> None:
        self._fd = fd
        self._stop = stop
        self._nonblocking = nonblocking
        self._parts: list[bytes] = []
        self.size = 0
        if nonblocking:
            os.set_blocking(fd, False)

    def add(self, data: bytes) -> None:
        self._parts.append(data)
        self.size += len(data)

    def unsent(self) -> bytes:
        return b"".join(self._parts)

    def write(self) -> bool:
        """Write what waits, as far as the client takes it at once; whether all of it went."""
        if not self._parts:
            return True
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        if not self._nonblocking:
            self._parts, self.size = [], 0
            with self._stop.interrupting():
                write_all(self._fd, data)
            return True
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        except ConnectionError:
            raise
        except (
            OSError
        ) as exc:  # The client is gone however the write failed (`core.stdio`, rule 4).
            raise ConnectionError(exc.errno, exc.strerror) from None
        self._parts = [data[written:]] if written < len(data) else []
        self.size = len(data) - written
        return not self._parts


def _write_records_unless_input(inputs: select.poll, audit: AuditTrail, stop: StopSignals) -> None:
    # Rule 6. The records of the calls answered so far wait for more of them, as long as the trail
    # allows; once input is slower than that, they are written before the read blocks. Input
    # is first looked for awake (`busy_poll`), except while records are overdue. A signal may
    # interrupt the wait, never the write, which would lose the records.
    due = audit.written_by()
    if due is not None and due <= audit.clock():
        audit.write_waiting()
        due = None
    if ready_within(lambda: bool(inputs.poll(0))) or due is None:
        return
    left = due - audit.clock()
    if left > 0:
        with stop.interrupting():
            if inputs.poll(math.ceil(left * 1000)):
                return
    audit.write_waiting()


def _read_chunk(in_fd: int, inputs: select.poll) -> bytes:
    while True:
        try:
            return read_input(in_fd)
        except BlockingIOError:
            # A socket that carries both directions shares the output's non-blocking mode:
            # wait until it is readable.
            inputs.poll()
