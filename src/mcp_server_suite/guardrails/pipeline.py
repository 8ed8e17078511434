"""The guarded path of one `tools/call`, in the design's order.

1. Structural sanitizer (no slot needed: it is cheap and refuses poisoned input early).
2. Concurrency slot, waited for at most the acquire timeout.
3. The tool's inline shortcut, if it has one (`ToolSpec.run_inline`): a call it can answer
   without waiting is answered at once, with the same checks of arguments and output as
   below. It runs before the deadline is armed: it never waits, so no timer could fire
   while it runs, and it costs nothing to leave the timer unset.
4. Execution deadline, covering everything below.
5. Strict argument schema: the arguments, as JSON, against the tool's frozen model.
6. The tool.
7. Output contract: the result, as JSON, against the tool's result model again.

A tool may take steps 5 to 7 on itself (`ToolSpec.run_checked`), holding the arguments and
its output to the same models without the round trips through JSON text; it runs within the
deadline, and when it declines (the arguments break the model) the steps above run and
report why.

`Guardrails.answer_now` is steps 1 and 3 alone, for the shell's blocking phase, where no
call holds a slot: the slot of step 2 is free by construction, so it is not taken, and a
call the shortcut declines goes to `invoke` (the event loop) unchanged.

Every refusal is a `ToolFailure` carrying an in-band problem. A result that breaks its own
contract is a bug in the tool, so it is raised as an ordinary exception and reported as an
internal error.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_server_suite.core.registry import ToolOutput, ToolSpec
from mcp_server_suite.guardrails.deadline import DEFAULT_DEADLINE_S, fail_after
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.sanitizer import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ITEMS,
    ensure_clean_arguments,
)

__all__ = ["DEFAULT_ACQUIRE_TIMEOUT_S", "Guardrails"]

# The design document's bounded wait for a slot: long enough to ride out a burst, short
# enough that a model learns quickly that the server is saturated.
DEFAULT_ACQUIRE_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Guardrails:
    """The limits applied to every call, and the limiter the calls share."""

    limiter: ConcurrencyLimiter
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT_S
    deadline: float = DEFAULT_DEADLINE_S
    max_depth: int = DEFAULT_MAX_DEPTH
    max_items: int = DEFAULT_MAX_ITEMS

    def answer_now(
        self, spec: ToolSpec[Any, Any], arguments: Mapping[str, Any]
    ) -> ToolOutput | None:
        """Answer a call at once, while no other call runs; None when it must be `invoke`d.

        Args:
            spec: The tool, already looked up by the dispatcher.
            arguments: The decoded `arguments` object.

        Returns:
            The checked result, or None when the tool has no shortcut, the shortcut declined,
            or a slot is held (then only `invoke` may run the call).

        Raises:
            ToolFailure: The sanitizer or the tool refused the call (in-band problem).
            OutputContractError: The tool broke its own result contract.
        """
        if spec.run_inline is None or self.limiter.in_use:
            return None
        ensure_clean_arguments(arguments, max_depth=self.max_depth, max_items=self.max_items)
        return spec.run_inline(arguments)

    async def invoke(self, spec: ToolSpec[Any, Any], arguments: Mapping[str, Any]) -> ToolOutput:
        """Run one call through every guardrail and the tool.

        Args:
            spec: The tool, already looked up by the dispatcher.
            arguments: The decoded `arguments` object.

        Returns:
            The checked result.

        Raises:
            ToolFailure: A guardrail or the tool refused the call (in-band problem).
            OutputContractError: The tool broke its own result contract.
        """
        ensure_clean_arguments(arguments, max_depth=self.max_depth, max_items=self.max_items)
        async with self.limiter.slot(self.acquire_timeout):
            if spec.run_inline is not None:
                output = spec.run_inline(arguments)
                if output is not None:
                    return output
            async with fail_after(self.deadline):
                if spec.run_checked is not None:
                    checked = await spec.run_checked(arguments)
                    if checked is not None:
                        return checked
                params = spec.parse_arguments(arguments)
                result = await spec.run(params)
                return spec.check_result(result)
