"""The tool registry: an immutable mapping from tool name to `ToolSpec`, built at start-up.

Rules:

1. A tool is described by data: its name, the strict model its arguments must satisfy, the
   model its result must satisfy, and one coroutine function from the first to the second.
   Tools never see JSON-RPC.
2. The registry is frozen once built. Nothing registers or removes a tool during a session,
   so `tools/list` never changes and the server advertises `listChanged: false`.
3. Tool names are short lower-case identifiers, so they are safe to echo in any message.
"""

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel

__all__ = ["TOOL_ANNOTATIONS", "ToolRegistry", "ToolSpec"]

ParamsT = TypeVar("ParamsT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)

# MCP allows longer names; 64 lower-case identifier characters are plenty and always printable.
_TOOL_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")

# Every tool in this suite only reads, so the hints are the same for all of them.
TOOL_ANNOTATIONS: Final[Mapping[str, bool]] = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


@dataclass(frozen=True, slots=True)
class ToolSpec(Generic[ParamsT, ResultT]):
    """One tool: its identity, its argument and result contracts, and its implementation.

    Attributes:
        name: The name clients call it by.
        title: A short human-readable name.
        description: What the tool does, for the model reading `tools/list`.
        params_model: The strict model the arguments are validated against.
        result_model: The strict model the result is re-checked against.
        run: The implementation; receives validated arguments, returns a result model or
            raises `ToolFailure`.
        close: Releases what the tool holds (a connection pool), once, at shutdown.
    """

    name: str
    title: str
    description: str
    params_model: type[ParamsT]
    result_model: type[ResultT]
    run: Callable[[ParamsT], Awaitable[ResultT]] = field(repr=False)
    close: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid tool name {self.name!r}")


class ToolRegistry(Mapping[str, ToolSpec[Any, Any]]):
    """An immutable, ordered mapping of tool name to `ToolSpec`.

    Args:
        specs: The tools, in the order `tools/list` reports them.

    Raises:
        ValueError: Two tools share a name.
    """

    __slots__ = ("_schemas", "_specs")

    def __init__(self, specs: Iterable[ToolSpec[Any, Any]]) -> None:
        ordered: dict[str, ToolSpec[Any, Any]] = {}
        for spec in specs:
            if spec.name in ordered:
                raise ValueError(f"duplicate tool name {spec.name!r}")
            ordered[spec.name] = spec
        self._specs: Final = ordered
        # JSON Schemas are generated on first use: start-up is user-visible latency.
        self._schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def __getitem__(self, name: str) -> ToolSpec[Any, Any]:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    async def aclose(self) -> None:
        """Release every tool's resources, in registration order."""
        for spec in self._specs.values():
            if spec.close is not None:
                await spec.close()

    def schemas(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Return the (input, output) JSON Schemas of a tool, generated once and cached.

        Args:
            name: A registered tool name.

        Returns:
            The JSON Schema of the arguments and of the structured result.

        Raises:
            KeyError: No tool has that name.
        """
        cached = self._schemas.get(name)
        if cached is None:
            spec = self._specs[name]
            cached = (
                spec.params_model.model_json_schema(mode="validation"),
                spec.result_model.model_json_schema(mode="serialization"),
            )
            self._schemas[name] = cached
        return cached
