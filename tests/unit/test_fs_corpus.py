"""The round 2 attack corpus for the file tools (`tests/vectors/fs.json`), case by case.

Every call case runs through the guardrails with both resolvers, over the fixture the corpus
describes, with its bind mounts and procfs mounted beneath the root for the module. The
scripted cases (races, memory) are run by the tests `SCRIPTED` names, and a test checks that
every id of the file is run somewhere. Beyond the expected outcome, no answer may hold the
outside canary (except the documented hard link) or a host path.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from tests.support.fs_tools import MODES, FileTools, as_nobody, call, file_tools
from tests.support.fs_tree import CANARY, SandboxTree, mounted, sandbox_tree

pytestmark = pytest.mark.root

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "fs.json").read_text("utf-8")
)

# The scripted cases and the tests that run them.
SCRIPTED = {
    "A165": ("tests.unit.test_fs_races", "test_leaf_swapped_for_an_outside_link"),
    "A169": ("tests.unit.test_fs_races", "test_leaf_swapped_for_a_fifo_never_opens_it"),
    "A172": ("tests.unit.test_fs_read", "test_nul_mebibyte_response_is_bounded"),
}


def test_every_case_is_run() -> None:
    kinds = {vector["kind"] for vector in VECTORS}
    assert kinds == {"call", "multi", "compare", "race_leaf", "race_fifo", "mem_amp"}
    scripted = {vector["id"] for vector in VECTORS if vector["kind"] not in CALL_KINDS}
    assert scripted == set(SCRIPTED)
    for module, name in SCRIPTED.values():
        assert callable(getattr(importlib.import_module(module), name))
    assert len(VECTORS) == 52


CALL_KINDS = frozenset({"call", "multi", "compare"})
CALLS = [vector for vector in VECTORS if vector["kind"] in CALL_KINDS]


@pytest.fixture(scope="module")
def tree() -> Iterator[SandboxTree]:
    with ExitStack() as mounts:
        built = mounts.enter_context(sandbox_tree())
        mounts.enter_context(mounted(str(built.outside), built.root / "bindout", "--bind"))
        mounts.enter_context(
            mounted(str(built.outside / "secret.txt"), built.root / "bindfile.txt", "--bind")
        )
        mounts.enter_context(mounted("proc", built.root / "procfs", "-t", "proc"))
        yield built


@pytest.fixture(scope="module", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def tools(tree: SandboxTree, mode: str) -> Iterator[FileTools]:
    with file_tools(tree.root, mode) as built:
        yield built


@pytest.fixture(scope="module")
def alias_tools(tree: SandboxTree, mode: str) -> Iterator[FileTools]:
    with file_tools(tree.root_link, mode) as built:
        yield built


def expand(tree: SandboxTree, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: tree.expand(value) if isinstance(value, str) else value
        for name, value in arguments.items()
    }


def answer_text(answer: dict[str, Any] | Problem) -> str:
    return answer.as_text() if isinstance(answer, Problem) else json.dumps(answer)


def check_clean(answer: dict[str, Any] | Problem, tree: SandboxTree, *, leak_ok: bool) -> None:
    text = answer_text(answer)
    if not leak_ok:
        assert CANARY not in text
    if isinstance(answer, Problem):
        assert str(tree.base) not in text


def run_case(
    vector: dict[str, Any], tree: SandboxTree, tools: FileTools, alias: FileTools
) -> list[dict[str, Any] | Problem]:
    spec = (alias if vector["session"] == "rootlink" else tools).read
    calls = vector["calls"] if vector["kind"] != "call" else [vector["arguments"]]
    arguments = [expand(tree, each) for each in calls]
    if vector["session"] == "nobody":
        dumped = as_nobody(lambda: [_dumped(call(spec, each)) for each in arguments])
        return [_loaded(each) for each in dumped]
    return [call(spec, each) for each in arguments]


def _dumped(answer: dict[str, Any] | Problem) -> dict[str, Any]:
    return {"problem": answer.as_dict()} if isinstance(answer, Problem) else {"result": answer}


def _loaded(dumped: dict[str, Any]) -> dict[str, Any] | Problem:
    if "result" in dumped:
        result: dict[str, Any] = dumped["result"]
        return result
    problem = dumped["problem"]
    return Problem.of(
        MCPErrorCode(problem["code"]),
        problem["detail"],
        invalid_params=tuple(problem["invalid_params"]),
    )


@pytest.mark.parametrize("vector", CALLS, ids=[vector["id"] for vector in CALLS])
def test_corpus_case(
    vector: dict[str, Any], tree: SandboxTree, tools: FileTools, alias_tools: FileTools
) -> None:
    expect = vector["expect"]
    answers = run_case(vector, tree, tools, alias_tools)
    for answer in answers:
        check_clean(answer, tree, leak_ok=bool(expect.get("documented_leak")))
    outcome = expect["outcome"]
    if outcome == "identical":
        # The same problem, but for the caller's own path, which each detail quotes.
        seen = set()
        for answer, arguments in zip(answers, vector["calls"], strict=True):
            assert isinstance(answer, Problem), answer
            quoted = repr(tree.expand(arguments["relative_path"]))
            seen.add((answer.code, answer.detail.replace(quoted, "PATH", 1)))
        assert len(seen) == 1, seen
        return
    if outcome == "no_leak":
        return
    (answer,) = answers
    if outcome == "reject":
        assert isinstance(answer, Problem), answer
        if "code" in expect:
            assert answer.code.value == expect["code"], answer.detail
        return
    assert outcome == "run"
    assert isinstance(answer, dict), answer_text(answer)
    for field in ("content", "resolved_path", "bytes_read", "truncated"):
        if field in expect:
            assert answer[field] == expect[field], field
    if expect.get("documented_leak"):
        # The residual risk, pinned: a hard link to an outside file is an ordinary file.
        assert CANARY in answer["content"]
