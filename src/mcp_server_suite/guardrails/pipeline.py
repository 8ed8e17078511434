"""The guarded path of one `tools/call`, in the design's order.

1. Structural sanitizer (no slot needed: it is cheap and refuses poisoned input early).
2. Concurrency slot, waited for at most the acquire timeout.
3. Execution deadline, covering everything below.
4. Strict argument schema: the arguments, as JSON, against the tool's frozen model.
5. The tool.
6. Output contract: the result, as JSON, against the tool's result model again.

Every refusal is a `ToolFailure` carrying an in-band problem. A result that breaks its own
contract is a bug in the tool, so it is raised as an ordinary exception and reported as an
internal error.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.guardrails.deadline import DEFAULT_DEADLINE_S, fail_after
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.sanitizer import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ITEMS,
    ensure_clean_arguments,
)
from mcp_server_suite.schemas.errors import PolicyViolation
from mcp_server_suite.schemas.problems import MAX_DETAIL_CHARS

__all__ = ["DEFAULT_ACQUIRE_TIMEOUT_S", "Guardrails", "ToolOutput"]

# The design document's bounded wait for a slot: long enough to ride out a burst, short
# enough that a model learns quickly that the server is saturated.
DEFAULT_ACQUIRE_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A result that passed its output contract, as JSON data and as the same JSON text."""

    structured: dict[str, Any]
    text: str


class OutputContractError(RuntimeError):
    """A tool returned a result its own result model refuses: a bug in the tool."""


@dataclass(frozen=True, slots=True)
class Guardrails:
    """The limits applied to every call, and the limiter the calls share."""

    limiter: ConcurrencyLimiter
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT_S
    deadline: float = DEFAULT_DEADLINE_S
    max_depth: int = DEFAULT_MAX_DEPTH
    max_items: int = DEFAULT_MAX_ITEMS

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
        async with self.limiter.slot(self.acquire_timeout), fail_after(self.deadline):
            params = _validate_arguments(spec.params_model, arguments)
            result = await spec.run(params)
            return _check_output(spec.result_model, result)


def _validate_arguments(model: type[BaseModel], arguments: Mapping[str, Any]) -> BaseModel:
    try:
        # JSON mode on purpose: the arguments arrived as JSON, and strict JSON-mode rules
        # (no string-to-number coercion, no float for an integer) are the contract.
        return model.model_validate_json(json.dumps(arguments))
    except ValidationError as exc:
        problems: list[str] = []
        fields: dict[str, None] = {}
        for error in exc.errors(include_url=False, include_input=False, include_context=False):
            where = ".".join(str(part) for part in error["loc"]) or "arguments"
            problems.append(f"{where}: {error['msg']}")
            if error["loc"]:
                fields[str(error["loc"][0])] = None
        detail = f"Invalid arguments: {'; '.join(problems)}."
        if len(detail) > MAX_DETAIL_CHARS:
            detail = detail[: MAX_DETAIL_CHARS - 3] + "..."
        raise PolicyViolation(detail, invalid_params=tuple(fields)) from None


def _check_output(model: type[BaseModel], result: object) -> ToolOutput:
    if not isinstance(result, model):
        raise OutputContractError(f"tool returned {type(result).__name__}, not {model.__name__}")
    text = result.model_dump_json()
    try:
        model.model_validate_json(text)
    except ValidationError as exc:
        raise OutputContractError(f"result breaks the {model.__name__} contract") from exc
    structured: dict[str, Any] = json.loads(text)
    return ToolOutput(structured, text)
