"""The calls the shell's blocking phase answers itself, before the event loop runs.

Rules:

1. Only a call that can be answered at once is answered here: one whose tool has a
   shortcut (`ToolSpec.run_inline`) that takes it, through `Guardrails.answer_now`. Any
   other call is left to the event loop, unstarted, exactly as the dispatcher started it.
2. A call answered here ends as it would on the event loop: the same reply for the same
   outcome (a refusal in-band, a crash as `-32603` with a correlation id), and one audit
   record, taken down after the reply is decided and before it is written; a reply the
   trail could not record is withheld.
3. Nothing here waits: no call is in flight while one is answered, so there is nothing to
   cancel, no deadline to keep and no output bound to wait for.
"""

import logging

from mcp_server_suite.audit.record import Crashed, Outcome, Refused, Succeeded
from mcp_server_suite.audit.trail import AuditTrail
from mcp_server_suite.core.jsonrpc import encode
from mcp_server_suite.core.server import Dispatcher, StartCall
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.errors import ToolFailure, new_correlation_id

__all__ = ["InlineCalls"]

logger = logging.getLogger(__name__)


class InlineCalls:
    """Answers calls at once, for the blocking phase.

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
