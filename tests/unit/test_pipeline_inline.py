"""The guarded call path's inline shortcut (`ToolSpec.run_inline`, pipeline step 3).

A tool that can answer without waiting does so inside its concurrency slot, after the
sanitizer, without a deadline armed; when it cannot, the call takes the full path.
"""

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mcp_server_suite.core.registry import ToolOutput, ToolSpec
from mcp_server_suite.guardrails import pipeline
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.errors import PolicyViolation, ToolFailure


class Params(StrictModel):
    value: str


class Result(StrictModel):
    echoed: str


class Recorder:
    """A tool whose shortcut answers, declines or refuses, and which records what ran."""

    def __init__(self, limiter: ConcurrencyLimiter, inline: str) -> None:
        self.limiter = limiter
        self.inline = inline
        self.ran: list[str] = []

    def run_inline(self, arguments: Mapping[str, Any]) -> ToolOutput | None:
        self.ran.append(f"inline, {self.limiter.in_use} slot in use")
        if self.inline == "answer":
            return ToolOutput({"echoed": "now"}, '{"echoed":"now"}')
        if self.inline == "refuse":
            raise ToolFailure("refused at once")
        return None

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
            run_inline=self.run_inline,
        )


def invoke(recorder: Recorder, arguments: dict[str, Any]) -> ToolOutput:
    rails = Guardrails(limiter=recorder.limiter)
    return asyncio.run(rails.invoke(recorder.spec(), arguments))


def test_an_inline_answer_is_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_deadline(seconds: float) -> Any:
        raise AssertionError("the deadline was armed for an inline answer")

    monkeypatch.setattr(pipeline, "fail_after", no_deadline)
    recorder = Recorder(ConcurrencyLimiter(2), "answer")
    output = invoke(recorder, {"value": "x"})
    assert output.structured == {"echoed": "now"}
    # It ran inside the call's slot, and the full path never ran.
    assert recorder.ran == ["inline, 1 slot in use"]
    assert recorder.limiter.in_use == 0


def test_a_declined_call_takes_the_full_path() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "decline")
    output = invoke(recorder, {"value": "x"})
    assert output.structured == {"echoed": "x"}
    assert recorder.ran == ["inline, 1 slot in use", "full"]


def test_an_inline_refusal_is_in_band() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "refuse")
    with pytest.raises(ToolFailure, match="refused at once"):
        invoke(recorder, {"value": "x"})
    assert recorder.limiter.in_use == 0


def test_the_sanitizer_runs_before_the_shortcut() -> None:
    recorder = Recorder(ConcurrencyLimiter(2), "answer")
    with pytest.raises(PolicyViolation):
        invoke(recorder, {"value": "a\u202eb"})
    assert recorder.ran == []


def test_a_busy_limiter_refuses_before_the_shortcut() -> None:
    recorder = Recorder(ConcurrencyLimiter(1), "answer")

    async def busy() -> None:
        await recorder.limiter.acquire(0)
        await Guardrails(limiter=recorder.limiter, acquire_timeout=0).invoke(
            recorder.spec(), {"value": "x"}
        )

    with pytest.raises(PolicyViolation, match="busy"):
        asyncio.run(busy())
    assert recorder.ran == []
