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
from json.encoder import encode_basestring as _string
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_server_suite.core.registry import OutputContractError, ToolOutput
from mcp_server_suite.schemas.fs import SandboxFSReadResult

__all__ = ["accept", "render", "render_read"]

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
        # `model_validate` without its wrapper: the model's own validator, in Python mode.
        validated: ModelT = model.__pydantic_validator__.validate_python(arguments)
    except ValidationError:
        return None
    return validated


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


def render_read(fields: dict[str, Any]) -> ToolOutput:
    """`render` for a read's fields, checked as they are, with the text written directly.

    A read's result is flat (two strings, three integers, a boolean), so its text is written
    member by member, in the model's order, with JSON's escapes for the strings: the same text
    `model_dump_json` writes (the tests hold it to that).

    Raises:
        OutputContractError: The fields break `SandboxFSReadResult`: a bug in the tool.
    """
    try:
        SandboxFSReadResult.__pydantic_validator__.validate_python(fields)
    except ValidationError as exc:
        raise OutputContractError("result breaks the SandboxFSReadResult contract") from exc
    text = (
        f'{{"resolved_path":{_string(fields["resolved_path"])},'
        f'"content":{_string(fields["content"])},'
        f'"offset":{fields["offset"]},"bytes_read":{fields["bytes_read"]},'
        f'"next_offset":{fields["next_offset"]},'
        f'"truncated":{"true" if fields["truncated"] else "false"}}}'
    )
    return ToolOutput(fields, text)
