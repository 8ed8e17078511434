"""The tool registry: what each tool is, described at start-up and loaded on first use.

Rules:

1. A tool has two halves. Its `ToolDescription` is static data (name, title, description,
   JSON Schemas), enough to answer `tools/list`. Its `ToolSpec` is the implementation: the
   strict model its arguments must satisfy, the model its result must satisfy, and one
   coroutine function from the first to the second. Tools never see JSON-RPC.
2. A `RegisteredTool` pairs the two and loads the spec on the first call, so start-up and
   `tools/list` import neither Pydantic nor any tool's dependencies. Resources that must be
   held from start-up (the sandbox root's descriptor) are acquired by the loader's closure
   before the registry is built; `release` frees them when the tool was never loaded.
3. The registry is frozen once built. Nothing registers or removes a tool during a session,
   so `tools/list` never changes and the server advertises `listChanged: false`.
4. Tool names are short lower-case identifiers, so they are safe to echo in any message.
5. Arguments are validated in JSON mode against the tool's strict model, and every result
   is re-checked against its model before it leaves: a result that breaks its own contract
   is a bug in the tool and is never sent. What every tool's arguments share (an integer
   may be written 5.0, null stands for a default, the listed schema is strict-ready) is the
   params models' own base, `schemas/arguments.py`, so every path that validates with the
   model holds to it.
6. A tool may also answer a call at once (`ToolSpec.run_inline`), on the event loop, when it
   can do so without waiting for anything. Whatever that shortcut answers must be what the
   full path would answer, and its own tests must hold it to that; whenever it is not sure,
   it returns None and the call takes the full path.
7. A tool that must wait may still spare the generic steps' round trips through JSON text
   (`ToolSpec.run_checked`): it takes the arguments as they arrived, accepts them exactly
   when its params model does (`accept_arguments`), and checks its output against
   its result model before it returns it. When the arguments break the model it returns
   None before doing anything else, and the full path reports the faults. Its tests hold it
   to the full path as rule 6 asks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from mcp_server_suite.schemas.errors import PolicyViolation

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "TOOL_ANNOTATIONS",
    "OutputContractError",
    "RegisteredTool",
    "ToolDescription",
    "ToolOutput",
    "ToolRegistry",
    "ToolSpec",
    "accept_arguments",
]

ParamsT = TypeVar("ParamsT", bound="BaseModel")
ResultT = TypeVar("ResultT", bound="BaseModel")

# MCP allows longer names; 64 lower-case identifier characters are plenty and always printable.
_TOOL_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")

# Every tool in this suite only reads, so the hints are the same for all of them.
TOOL_ANNOTATIONS: Final[Mapping[str, bool]] = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


class OutputContractError(RuntimeError):
    """A tool returned a result its own result model refuses: a bug in the tool."""


@dataclass(frozen=True, slots=True)
class ToolDescription:
    """What `tools/list` says about a tool: static data, available without loading it."""

    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid tool name {self.name!r}")


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A result that passed its output contract, as JSON data and as the same JSON text."""

    structured: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class ToolSpec(Generic[ParamsT, ResultT]):
    """One tool's implementation: its contracts and the coroutine that runs it.

    Attributes:
        name: The name clients call it by.
        title: A short human-readable name.
        description: What the tool does, for the model reading `tools/list`.
        params_model: The strict model the arguments are validated against.
        result_model: The strict model the result is re-checked against.
        run: The implementation; receives validated arguments, returns a result model or
            raises `ToolFailure`.
        close: Releases what the tool holds (a connection pool), once, at shutdown.
        run_inline: The shortcut of rule 6: given the sanitized arguments, it returns the
            checked output, raises `ToolFailure`, or returns None for the full path. It must
            never block.
        run_checked: The path of rule 7: given the sanitized arguments, it returns the
            checked output, raises `ToolFailure`, or returns None, at once, when the
            arguments break the params model.
    """

    name: str
    title: str
    description: str
    params_model: type[ParamsT]
    result_model: type[ResultT]
    run: Callable[[ParamsT], Awaitable[ResultT]] = field(repr=False)
    close: Callable[[], Coroutine[Any, Any, None]] | None = field(default=None, repr=False)
    run_inline: Callable[[Mapping[str, Any]], ToolOutput | None] | None = field(
        default=None, repr=False
    )
    run_checked: Callable[[Mapping[str, Any]], Awaitable[ToolOutput | None]] | None = field(
        default=None, repr=False
    )

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid tool name {self.name!r}")

    def describe(self) -> ToolDescription:
        """Derive the static description from the models (this needs Pydantic)."""
        return ToolDescription(
            self.name,
            self.title,
            self.description,
            self.params_model.model_json_schema(mode="validation"),
            self.result_model.model_json_schema(mode="serialization"),
        )

    def parse_arguments(self, arguments: Mapping[str, Any]) -> ParamsT:
        """Validate arguments in JSON mode against the strict params model.

        Args:
            arguments: The decoded `arguments` object, already sanitized.

        Returns:
            The validated arguments.

        Raises:
            PolicyViolation: The arguments break the model; the problem names each fault
                and the top-level arguments at fault.
        """
        # Pydantic is loaded with the tool's own models; importing it here keeps it off the
        # start-up path of the registry.
        from pydantic import ValidationError  # noqa: PLC0415

        try:
            # JSON mode on purpose: the arguments arrived as JSON, and strict JSON-mode rules
            # (no string-to-number coercion, no fraction or boolean for an integer) are the
            # contract, with the wire rules of the model's base (`ToolArguments`).
            return self.params_model.model_validate_json(json.dumps(arguments))
        except ValidationError as exc:
            faults: list[str] = []
            fields: dict[str, None] = {}
            for error in exc.errors(include_url=False, include_input=False, include_context=False):
                where = ".".join(str(part) for part in error["loc"]) or "arguments"
                faults.append(f"{where}: {error['msg']}")
                if error["loc"]:
                    fields[str(error["loc"][0])] = None
            raise PolicyViolation(
                f"Invalid arguments: {'; '.join(faults)}.", invalid_params=tuple(fields)
            ) from None

    def check_result(self, result: object) -> ToolOutput:
        """Re-check a result against the result model, in JSON mode.

        Returns:
            The result as JSON data and as the same JSON text.

        Raises:
            OutputContractError: The result is not the model, or breaks it.
        """
        from pydantic import ValidationError  # noqa: PLC0415  # Loaded with the models.

        model = self.result_model
        if not isinstance(result, model):
            raise OutputContractError(
                f"tool returned {type(result).__name__}, not {model.__name__}"
            )
        text = result.model_dump_json()
        try:
            model.model_validate_json(text)
        except ValidationError as exc:
            raise OutputContractError(f"result breaks the {model.__name__} contract") from exc
        structured: dict[str, Any] = json.loads(text)
        return ToolOutput(structured, text)


def accept_arguments(model: type[ParamsT], arguments: Mapping[str, Any]) -> ParamsT | None:
    """Validate decoded arguments strictly, as they are; None when the model refuses them.

    For a params model whose fields hold JSON's own types only (strings, numbers, booleans,
    null, and lists and nested models of them), strict validation of the decoded arguments
    accepts exactly what `ToolSpec.parse_arguments` accepts, with the same values, without
    the round trip through JSON text. For any other field it can only refuse more, never
    accept more. Either way a refusal says nothing: the caller falls back to
    `parse_arguments`, which names every fault.

    Args:
        model: The tool's params model.
        arguments: The decoded `arguments` object, already sanitized.

    Returns:
        The validated arguments, or None.
    """
    from pydantic import ValidationError  # noqa: PLC0415  # Loaded with the models.

    try:
        validated: ParamsT = model.__pydantic_validator__.validate_python(arguments)
    except ValidationError:
        return None
    return validated


class RegisteredTool:
    """A tool as the registry holds it: described now, loaded on its first call.

    Args:
        description: The static description `tools/list` reports.
        load: Builds the implementation; called at most once.
        release: Frees what was acquired for the tool at start-up, if it is never loaded.
    """

    __slots__ = ("_load", "_release", "_spec", "description")

    def __init__(
        self,
        description: ToolDescription,
        load: Callable[[], ToolSpec[Any, Any]],
        release: Callable[[], None] | None = None,
    ) -> None:
        self.description: Final = description
        self._load = load
        self._release = release
        self._spec: ToolSpec[Any, Any] | None = None

    @classmethod
    def loaded(cls, spec: ToolSpec[Any, Any]) -> RegisteredTool:
        """Register an implementation that is already built (its description is derived)."""
        tool = cls(spec.describe(), lambda: spec)
        tool._spec = spec
        return tool

    @property
    def is_loaded(self) -> bool:
        """Whether the implementation has been built."""
        return self._spec is not None

    def spec(self) -> ToolSpec[Any, Any]:
        """Return the implementation, building it on the first call.

        Raises:
            RuntimeError: The loader built a tool of another name.
        """
        if self._spec is None:
            spec = self._load()
            if spec.name != self.description.name:
                raise RuntimeError(f"loader for {self.description.name!r} built {spec.name!r}")
            self._spec = spec
        return self._spec

    async def aclose(self) -> None:
        """Release the tool's resources, whether or not it was ever loaded."""
        if self._spec is not None:
            if self._spec.close is not None:
                await self._spec.close()
        else:
            self.release_unloaded()

    def release_unloaded(self) -> None:
        """Release what was acquired at start-up, if the tool was never loaded."""
        if self._spec is None and self._release is not None:
            self._release()
            self._release = None


class ToolRegistry(Mapping[str, RegisteredTool]):
    """An immutable, ordered mapping of tool name to `RegisteredTool`.

    Args:
        tools: The tools, in the order `tools/list` reports them.

    Raises:
        ValueError: Two tools share a name.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[RegisteredTool]) -> None:
        ordered: dict[str, RegisteredTool] = {}
        for tool in tools:
            name = tool.description.name
            if name in ordered:
                raise ValueError(f"duplicate tool name {name!r}")
            ordered[name] = tool
        self._tools: Final = ordered

    def __getitem__(self, name: str) -> RegisteredTool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    async def aclose(self) -> None:
        """Release every tool's resources, in registration order."""
        for tool in self._tools.values():
            await tool.aclose()

    def release_unloaded(self) -> None:
        """Release the start-up resources of the tools never loaded (no event loop needed)."""
        for tool in self._tools.values():
            tool.release_unloaded()
