"""Guardrails: the sanitizer, the FIFO limiter, the deadline and the guarded call path."""

import asyncio
import sys
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field, model_validator

from mcp_server_suite.core.registry import OutputContractError, ToolSpec
from mcp_server_suite.guardrails.deadline import fail_after
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.guardrails.sanitizer import MAX_KEY_CHARS, ensure_clean_arguments
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.errors import DeadlineExceeded, PolicyViolation, ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode

# --- sanitizer -------------------------------------------------------------------------

CLEAN = [
    pytest.param({}, id="empty"),
    pytest.param({"query": "SELECT 1\n\tFROM t\r\n"}, id="tab-newline-cr"),
    pytest.param({"relative_path": "caf\u00e9/\u65e5\u672c.txt"}, id="non-ascii-letters"),
    pytest.param({"a": "\U0001f600 emoji"}, id="astral"),
    pytest.param({"a": "non\u00a0breaking space"}, id="nbsp"),
    pytest.param({"_private": 1, "A9": [1, 2, {"b": None}]}, id="identifier-keys"),
    pytest.param({"n": 1, "f": 1.5, "b": True, "z": None}, id="scalars"),
]


@pytest.mark.parametrize("arguments", CLEAN)
def test_clean_arguments_pass(arguments: dict[str, Any]) -> None:
    ensure_clean_arguments(arguments)


POISONED = [
    pytest.param({"q": "a\u202eb"}, "q", id="rlo-trojan-source"),
    pytest.param({"q": "a\u2066b"}, "q", id="lri-isolate"),
    pytest.param({"q": "a\u200bb"}, "q", id="zero-width-space"),
    pytest.param({"q": "a\u200db"}, "q", id="zero-width-joiner"),
    pytest.param({"q": "\ufeffa"}, "q", id="bom"),
    pytest.param({"q": "\U000e0041"}, "q", id="tag-character"),
    pytest.param({"q": "a\x00b"}, "q", id="nul"),
    pytest.param({"q": "a\x1bb"}, "q", id="escape"),
    pytest.param({"q": "a\x7fb"}, "q", id="delete"),
    pytest.param({"q": "a\x85b"}, "q", id="c1-next-line"),
    pytest.param({"q": "a\ud800b"}, "q", id="lone-surrogate"),
    pytest.param({"q": ["ok", {"deep": "a\u202eb"}]}, "q", id="nested-value"),
    pytest.param({"__proto__": 1}, None, id="dunder-key"),
    pytest.param({"__class__": 1}, None, id="dunder-class"),
    pytest.param({"a-b": 1}, None, id="dash-key"),
    pytest.param({"../x": 1}, None, id="path-key"),
    pytest.param({"": 1}, None, id="empty-key"),
    pytest.param({"1a": 1}, None, id="digit-first-key"),
    pytest.param({"caf\u00e9": 1}, None, id="non-ascii-key"),
    pytest.param({"k" * (MAX_KEY_CHARS + 1): 1}, None, id="long-key"),
    pytest.param({"a": {"b\u200b": 1}}, "a", id="nested-bad-key"),
]


@pytest.mark.parametrize(("arguments", "top"), POISONED)
def test_poisoned_arguments_are_refused(arguments: dict[str, Any], top: str | None) -> None:
    with pytest.raises(PolicyViolation) as caught:
        ensure_clean_arguments(arguments)
    problem = caught.value.problem
    assert problem.code is MCPErrorCode.VALIDATION_ERROR
    # A bad key of the arguments object itself is not named: it is the refused text.
    assert problem.invalid_params == ((top,) if top is not None else ())
    # The refused text is never echoed back.
    assert "\u202e" not in problem.detail
    assert "__proto__" not in problem.detail


def test_key_length_limit_is_inclusive() -> None:
    ensure_clean_arguments({"k" * MAX_KEY_CHARS: 1})


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_depth_limit() -> None:
    ensure_clean_arguments(nested(8), max_depth=8)
    with pytest.raises(PolicyViolation, match="deeper than 8"):
        ensure_clean_arguments(nested(9), max_depth=8)


def test_depth_counts_arrays() -> None:
    ensure_clean_arguments({"a": [[1]]}, max_depth=3)
    with pytest.raises(PolicyViolation):
        ensure_clean_arguments({"a": [[[1]]]}, max_depth=3)


def test_item_limit_on_arrays_and_objects() -> None:
    ensure_clean_arguments({"a": list(range(1000))})
    with pytest.raises(PolicyViolation, match="more than 1000"):
        ensure_clean_arguments({"a": list(range(1001))})
    with pytest.raises(PolicyViolation, match="more than 3"):
        ensure_clean_arguments({f"k{i}": i for i in range(4)}, max_items=3)


def test_the_arguments_object_itself_has_no_argument_name() -> None:
    with pytest.raises(PolicyViolation) as caught:
        ensure_clean_arguments({"a": 1, "b": 2}, max_items=1)
    assert caught.value.problem.invalid_params == ()


def test_walk_is_iterative() -> None:
    deep: list[Any] = []
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    with pytest.raises(PolicyViolation):
        ensure_clean_arguments({"a": deep}, max_depth=64)


def refused_by_unicode(char: str) -> bool:
    category = unicodedata.category(char)
    return char not in "\t\n\r" and category in {"Cc", "Cf", "Cs"}


@given(st.characters(codec=None))
def test_every_code_point_matches_the_unicodedata_oracle(char: str) -> None:
    arguments = {"text": f"a{char}b"}
    if refused_by_unicode(char):
        with pytest.raises(PolicyViolation):
            ensure_clean_arguments(arguments)
    else:
        ensure_clean_arguments(arguments)


def test_every_format_and_control_code_point_is_refused() -> None:
    # Exhaustive over the whole code space, so the oracle holds for every character this
    # interpreter's Unicode database knows, not just those Hypothesis happened to draw.
    refused = [chr(c) for c in range(sys.maxunicode + 1) if refused_by_unicode(chr(c))]
    assert len(refused) > 2000
    for char in refused:
        with pytest.raises(PolicyViolation):
            ensure_clean_arguments({"t": char})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_sanitizer_refuses_exactly_what_the_rules_say(arguments: dict[str, Any]) -> None:
    def violates(value: Any, depth: int) -> bool:
        if isinstance(value, str):
            return any(refused_by_unicode(c) for c in value)
        if isinstance(value, dict):
            bad_key = any(
                not k.isascii()
                or not (k[:1].isalpha() or k[:1] == "_")
                or not k.replace("_", "a").isalnum()
                or k.startswith("__")
                or len(k) > MAX_KEY_CHARS
                for k in value
            )
            return (
                depth > 8
                or len(value) > 1000
                or bad_key
                or any(violates(v, depth + 1) for v in value.values())
            )
        if isinstance(value, list):
            return depth > 8 or len(value) > 1000 or any(violates(v, depth + 1) for v in value)
        return False

    if violates(arguments, 1):
        with pytest.raises(PolicyViolation):
            ensure_clean_arguments(arguments)
    else:
        ensure_clean_arguments(arguments)


# --- limiter ---------------------------------------------------------------------------


def test_limiter_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="positive"):
        ConcurrencyLimiter(0)


async def test_slots_are_granted_in_arrival_order() -> None:
    limiter = ConcurrencyLimiter(1)
    order: list[int] = []
    gate = asyncio.Event()

    async def worker(n: int) -> None:
        async with limiter.slot(5):
            order.append(n)
            await gate.wait()

    async with asyncio.TaskGroup() as group:
        for n in range(5):
            group.create_task(worker(n))
            await asyncio.sleep(0)
        assert limiter.in_use == 1
        assert limiter.waiting == 4
        gate.set()
    assert order == [0, 1, 2, 3, 4]
    assert (limiter.in_use, limiter.waiting) == (0, 0)


async def test_a_newcomer_cannot_overtake_the_queue() -> None:
    limiter = ConcurrencyLimiter(1)
    held = asyncio.Event()
    release = asyncio.Event()
    order: list[str] = []

    async def holder() -> None:
        async with limiter.slot(5):
            held.set()
            await release.wait()

    async def waiter(name: str) -> None:
        async with limiter.slot(5):
            order.append(name)

    async with asyncio.TaskGroup() as group:
        group.create_task(holder())
        await held.wait()
        group.create_task(waiter("queued"))
        await asyncio.sleep(0)
        release.set()
        # Between the release and the queued waiter running, a newcomer arrives.
        group.create_task(waiter("newcomer"))
    assert order == ["queued", "newcomer"]


async def test_zero_timeout_refuses_at_once_when_busy() -> None:
    limiter = ConcurrencyLimiter(1)
    async with limiter.slot(0):
        with pytest.raises(PolicyViolation) as caught:
            async with limiter.slot(0):
                pytest.fail("must not get a slot")
    problem = caught.value.problem
    assert problem.code is MCPErrorCode.INTERNAL_ERROR
    assert problem.metadata == {"retryable": True, "max_concurrent_calls": 1}


async def test_wait_is_bounded() -> None:
    limiter = ConcurrencyLimiter(1)
    async with limiter.slot(0):
        with pytest.raises(PolicyViolation, match=r"within 0\.05 s"):
            async with limiter.slot(0.05):
                pytest.fail("must not get a slot")
    assert limiter.waiting == 0
    async with limiter.slot(0):
        pass


async def test_queue_is_bounded() -> None:
    limiter = ConcurrencyLimiter(1, max_waiters=2)
    assert limiter.slots == 1
    gate = asyncio.Event()

    async def hold() -> None:
        async with limiter.slot(5):
            await gate.wait()

    async with asyncio.TaskGroup() as group:
        for _ in range(3):
            group.create_task(hold())
        await asyncio.sleep(0)
        assert limiter.waiting == 2
        with pytest.raises(PolicyViolation, match="in use"):
            async with limiter.slot(5):
                pytest.fail("must not get a slot")
        gate.set()


async def test_default_queue_is_four_per_slot() -> None:
    limiter = ConcurrencyLimiter(2)
    gate = asyncio.Event()

    async def hold() -> None:
        async with limiter.slot(5):
            await gate.wait()

    async with asyncio.TaskGroup() as group:
        for _ in range(10):
            group.create_task(hold())
        await asyncio.sleep(0)
        assert (limiter.in_use, limiter.waiting) == (2, 8)
        with pytest.raises(PolicyViolation):
            async with limiter.slot(5):
                pytest.fail("must not get a slot")
        gate.set()


async def test_cancelled_waiter_leaves_the_queue() -> None:
    limiter = ConcurrencyLimiter(1)
    async with limiter.slot(0):
        task = asyncio.create_task(limiter.slot(5).__aenter__())
        await asyncio.sleep(0)
        assert limiter.waiting == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limiter.waiting == 0
    assert limiter.in_use == 0


async def test_slot_granted_to_a_cancelled_waiter_is_passed_on() -> None:
    limiter = ConcurrencyLimiter(1)
    got: list[str] = []

    async def take(name: str) -> None:
        async with limiter.slot(5):
            got.append(name)

    holder = limiter.slot(0)
    await holder.__aenter__()
    first = asyncio.create_task(take("first"))
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0)
    # Release hands the slot to `first`, and `first` is cancelled before it can run.
    await holder.__aexit__(None, None, None)
    first.cancel()
    await asyncio.gather(first, second, return_exceptions=True)
    assert got == ["second"]
    assert (limiter.in_use, limiter.waiting) == (0, 0)


async def test_release_skips_a_waiter_cancelled_before_it_ran() -> None:
    limiter = ConcurrencyLimiter(1)
    got: list[str] = []

    async def take(name: str) -> None:
        async with limiter.slot(5):
            got.append(name)

    holder = limiter.slot(0)
    await holder.__aenter__()
    first = asyncio.create_task(take("first"))
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0)
    # `first` is cancelled, then the slot is released before `first` runs its clean-up.
    first.cancel()
    await holder.__aexit__(None, None, None)
    await asyncio.gather(first, second, return_exceptions=True)
    assert got == ["second"]
    assert (limiter.in_use, limiter.waiting) == (0, 0)


async def test_released_slot_with_no_waiters_returns_to_the_pool() -> None:
    limiter = ConcurrencyLimiter(2)
    async with limiter.slot(0), limiter.slot(0):
        assert limiter.in_use == 2
    assert limiter.in_use == 0


# --- deadline --------------------------------------------------------------------------


async def test_deadline_raises_deadline_exceeded() -> None:
    with pytest.raises(DeadlineExceeded) as caught:
        async with fail_after(0.01):
            await asyncio.sleep(5)
    problem = caught.value.problem
    assert problem.code is MCPErrorCode.EXECUTION_TIMEOUT
    assert problem.status == 504
    assert problem.metadata == {"deadline_seconds": 0.01}


async def test_deadline_leaves_fast_bodies_alone() -> None:
    async with fail_after(5):
        await asyncio.sleep(0)


async def test_a_timeout_inside_the_body_is_not_the_deadline() -> None:
    with pytest.raises(TimeoutError):
        async with fail_after(5):
            raise TimeoutError


# --- the guarded call path ---------------------------------------------------------------


class Params(StrictModel):
    count: int = Field(ge=0, le=10)
    label: str = "x"


class Result(StrictModel):
    total: int


async def add_one(params: Params) -> Result:
    return Result(total=params.count + 1)


def spec(run: Any = add_one, result_model: type[StrictModel] = Result) -> ToolSpec[Any, Any]:
    return ToolSpec("adder", "Adder", "Adds one.", Params, result_model, run)


def guardrails(**overrides: Any) -> Guardrails:
    return Guardrails(limiter=ConcurrencyLimiter(2), **overrides)


async def test_invoke_returns_checked_json() -> None:
    output = await guardrails().invoke(spec(), {"count": 2})
    assert output.structured == {"total": 3}
    assert output.text == '{"total":3}'


@pytest.mark.parametrize(
    ("arguments", "fields"),
    [
        ({"count": "2"}, ("count",)),
        ({"count": 2.0}, ("count",)),
        ({"count": True}, ("count",)),
        ({"count": 11}, ("count",)),
        ({}, ("count",)),
        ({"count": 1, "extra": 1}, ("extra",)),
        ({"count": 1, "label": 5}, ("label",)),
    ],
)
async def test_strict_schema_refusals_are_in_band(
    arguments: dict[str, Any], fields: tuple[str, ...]
) -> None:
    with pytest.raises(PolicyViolation) as caught:
        await guardrails().invoke(spec(), arguments)
    problem = caught.value.problem
    assert problem.code is MCPErrorCode.VALIDATION_ERROR
    assert problem.invalid_params == fields
    assert problem.detail.startswith("Invalid arguments: ")


async def test_schema_detail_is_bounded() -> None:
    arguments = {f"extra{i}": i for i in range(200)} | {"count": 1}
    with pytest.raises(PolicyViolation) as caught:
        await guardrails().invoke(spec(), arguments)
    assert len(caught.value.problem.detail) <= 1024
    assert caught.value.problem.detail.endswith("...")


async def test_sanitizer_runs_before_the_schema() -> None:
    with pytest.raises(PolicyViolation, match="sanitizer"):
        await guardrails().invoke(spec(), {"count": 1, "label": "\u202e"})


async def test_sanitizer_refusal_uses_no_slot() -> None:
    rails = Guardrails(limiter=ConcurrencyLimiter(1), acquire_timeout=0)
    async with rails.limiter.slot(0):
        with pytest.raises(PolicyViolation, match="sanitizer"):
            await rails.invoke(spec(), {"label": "\x00"})


async def test_configured_sanitizer_limits_apply() -> None:
    rails = guardrails(max_items=1)
    with pytest.raises(PolicyViolation, match="more than 1"):
        await rails.invoke(spec(), {"count": 1, "label": "y"})


async def test_tool_failures_pass_through() -> None:
    async def refuse(params: Params) -> Result:
        raise ToolFailure("no", code=MCPErrorCode.ACCESS_DENIED)

    with pytest.raises(ToolFailure) as caught:
        await guardrails().invoke(spec(refuse), {"count": 1})
    assert caught.value.problem.code is MCPErrorCode.ACCESS_DENIED


async def test_deadline_covers_the_tool() -> None:
    async def slow(params: Params) -> Result:
        await asyncio.sleep(5)
        return Result(total=0)

    with pytest.raises(DeadlineExceeded):
        await guardrails(deadline=0.02).invoke(spec(slow), {"count": 1})


async def test_slot_is_released_after_each_outcome() -> None:
    rails = Guardrails(limiter=ConcurrencyLimiter(1), acquire_timeout=0)

    async def boom(params: Params) -> Result:
        raise RuntimeError("bug")

    for _ in range(3):
        await rails.invoke(spec(), {"count": 1})
        with pytest.raises(PolicyViolation):
            await rails.invoke(spec(), {"count": 99})
        with pytest.raises(RuntimeError):
            await rails.invoke(spec(boom), {"count": 1})
    assert rails.limiter.in_use == 0


async def test_wrong_result_type_is_a_contract_error() -> None:
    async def wrong(params: Params) -> Params:
        return params

    with pytest.raises(OutputContractError, match="not Result"):
        await guardrails().invoke(spec(wrong), {"count": 1})


async def test_result_breaking_its_contract_is_a_contract_error() -> None:
    class Bounded(StrictModel):
        total: int = Field(le=1)

    async def sneaky(params: Params) -> Bounded:
        # model_construct skips validation, as a buggy tool might.
        return Bounded.model_construct(total=params.count + 5)

    with pytest.raises(OutputContractError, match="Bounded contract"):
        await guardrails().invoke(spec(sneaky, Bounded), {"count": 1})


async def test_model_level_refusals_name_no_field() -> None:
    class Pair(StrictModel):
        low: int
        high: int

        @model_validator(mode="after")
        def _ordered(self) -> "Pair":
            if self.low > self.high:
                raise ValueError("low must not exceed high")
            return self

    async def run(params: Pair) -> Result:
        return Result(total=params.high - params.low)

    tool = ToolSpec("pair", "Pair", "d", Pair, Result, run)
    with pytest.raises(PolicyViolation) as caught:
        await guardrails().invoke(tool, {"low": 2, "high": 1})
    problem = caught.value.problem
    assert problem.invalid_params == ()
    assert "arguments: Value error, low must not exceed high" in problem.detail
