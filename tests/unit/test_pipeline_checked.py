"""The guarded call path's checked shortcut (`ToolSpec.run_checked`, the registry's rule 7).

A tool that takes its arguments as they arrived and returns its output checked runs inside
its concurrency slot and its deadline; when it declines, the generic steps run and report
the faults; `accept_arguments` accepts what JSON-mode validation accepts.
"""

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mcp_server_suite.core.registry import ToolOutput, ToolSpec, accept_arguments
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.errors import DeadlineExceeded, PolicyViolation, ToolFailure


class Params(StrictModel):
    value: str


class Result(StrictModel):
    echoed: str


class Recorder:
    """A tool whose checked path answers, refuses or sleeps, and which records what ran."""

    def __init__(self, limiter: ConcurrencyLimiter, checked: str) -> None:
        self.limiter = limiter
        self.checked = checked
        self.ran: list[str] = []

    async def run_checked(self, arguments: Mapping[str, Any]) -> ToolOutput | None:
        params = accept_arguments(Params, arguments)
        if params is None:
            self.ran.append("declined")
            return None
        self.ran.append(f"checked, {self.limiter.in_use} slot in use")
        if self.checked == "refuse":
            raise ToolFailure("refused")
        if self.checked == "sleep":
            await asyncio.sleep(5)
        return ToolOutput({"echoed": params.value}, f'{{"echoed":"{params.value}"}}')

    async def run(self, params: Params) -> Result:
        self.ran.append("full")
        return Result(echoed=params.value)

    def spec(self) -> ToolSpec[Params, Result]:
        return ToolSpec(
            name="echo",
            title="Echo",
            description="Echo a value.",
            params_model=Params,
            result_model=Result,
            run=self.run,
            run_checked=self.run_checked,
        )


def invoke(recorder: Recorder, arguments: dict[str, Any], deadline: float = 5.0) -> ToolOutput:
    rails = Guardrails(limiter=recorder.limiter, deadline=deadline)
    return asyncio.run(rails.invoke(recorder.spec(), arguments))


def test_a_checked_answer_is_the_answer() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "answer")
    output = invoke(recorder, {"value": "x"})
    assert output == ToolOutput({"echoed": "x"}, '{"echoed":"x"}')
    assert recorder.ran == ["checked, 1 slot in use"]
    assert recorder.limiter.in_use == 0


def test_declined_arguments_are_reported_by_the_generic_path() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "answer")
    with pytest.raises(PolicyViolation) as caught:
        invoke(recorder, {"value": 3})
    assert "value" in caught.value.problem.detail
    # The generic path named the fault; the tool itself never ran.
    assert recorder.ran == ["declined"]


def test_a_refusal_is_the_answer() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "refuse")
    with pytest.raises(ToolFailure, match="refused"):
        invoke(recorder, {"value": "x"})
    assert recorder.ran == ["checked, 1 slot in use"]
    assert recorder.limiter.in_use == 0


def test_the_checked_path_runs_within_the_deadline() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "sleep")
    with pytest.raises(DeadlineExceeded):
        invoke(recorder, {"value": "x"}, deadline=0.05)
    assert recorder.limiter.in_use == 0


@pytest.mark.parametrize(
    "arguments",
    [{"value": "x"}, {"value": 1}, {"value": True}, {"value": None}, {}, {"value": "x", "y": 1}],
)
def test_accepting_arguments_is_json_mode_validation(arguments: dict[str, Any]) -> None:
    spec = Recorder(ConcurrencyLimiter(1), "answer").spec()
    accepted = accept_arguments(Params, arguments)
    try:
        validated = spec.parse_arguments(arguments)
    except PolicyViolation:
        assert accepted is None
    else:
        assert accepted == validated
