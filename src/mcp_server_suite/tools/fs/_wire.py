"""The inline path's arguments and output, held to what the full path does with them.

The full path (`core/registry.py`) validates arguments in JSON mode, against their JSON text,
and re-checks a result by dumping it to JSON and validating that again. The file tools'
models hold only JSON's own types (strings, integers, booleans, null, and lists and nested
models of them), and for such models strict validation of the decoded arguments accepts
exactly what JSON-mode validation of their text accepts, with the same values; and a result's
`model_dump` is already its JSON data. So the inline path does the same checks without the
round trips through JSON text. The tests hold both functions to the full path with
Hypothesis: the same acceptances, the same models, the same output.
"""

import json
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_server_suite.core.registry import OutputContractError, ToolOutput

__all__ = ["accept", "render"]

ModelT = TypeVar("ModelT", bound=BaseModel)

# The text block as Pydantic's `model_dump_json` writes it: compact, UTF-8, with JSON's
# escapes for quotes, backslashes and control characters.
_TEXT: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def accept(model: type[ModelT], arguments: Mapping[str, Any]) -> ModelT | None:
    """Validate decoded arguments strictly; None when they break the model.

    The full path then validates them again and reports every fault, so this one never has
    to say what was wrong.
    """
    try:
        return model.model_validate(arguments)
    except ValidationError:
        return None


def render(result: BaseModel) -> ToolOutput:
    """Re-check a result against its model and render it as JSON data and JSON text.

    Raises:
        OutputContractError: The result breaks its model: a bug in the tool.
    """
    structured = result.model_dump()
    try:
        type(result).model_validate(structured)
    except ValidationError as exc:
        raise OutputContractError(f"result breaks the {type(result).__name__} contract") from exc
    return ToolOutput(structured, _TEXT.encode(structured))
