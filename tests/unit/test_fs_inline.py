"""The file read's inline path, held to the full path it stands in for.

`sandbox_fs_read` answers on the event loop when nothing can wait (`FileReader.read_now`,
through `ToolSpec.run_inline`). Its three parts are each held to the full path with
Hypothesis: accepting arguments (strict Python-mode validation against JSON-mode validation of
the same arguments' JSON text), reading (against `read_blocking`, over random paths in the
fixture), and rendering the output (against `ToolSpec.check_result`). And the conditions under
which it must not run at all (a file system that can hang) are checked here.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mcp_server_suite.core.registry import OutputContractError
from mcp_server_suite.schemas.errors import PolicyViolation, ToolFailure
from mcp_server_suite.schemas.fs import (
    MAX_MAX_BYTES,
    MAX_OFFSET,
    SandboxFSEntry,
    SandboxFSListResult,
    SandboxFSReadParams,
    SandboxFSReadResult,
)
from mcp_server_suite.tools.fs import _wire
from mcp_server_suite.tools.fs.read import INLINE_MAX_BYTES, FileReader
from mcp_server_suite.tools.fs.resolution import Resolver
from mcp_server_suite.tools.fs.root import open_root
from tests.support.fs_tools import FileTools, file_tools
from tests.support.fs_tree import FSTree, build_fs_tree, ensure_complete

# --- accepting arguments -------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["utf-8", "UTF8", "latin-1", "utf-7", "base64", "ok.txt", "../x", ""]),
    st.sampled_from([0, 1, 65_536, MAX_MAX_BYTES, MAX_MAX_BYTES + 1, MAX_OFFSET, MAX_OFFSET + 1]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
argument_names = st.sampled_from(["relative_path", "encoding", "max_bytes", "offset", "other"])
arguments = st.dictionaries(argument_names, json_values, max_size=5)


def _surrogate_free(value: Any) -> bool:
    # The JSON guard refuses lone surrogates before any of this runs.
    return "\\ud" not in json.dumps(value).lower()


@given(arguments=arguments)
@example(arguments={"relative_path": "ok.txt"})
@example(arguments={"relative_path": "ok.txt", "max_bytes": True})
@example(arguments={"relative_path": "ok.txt", "max_bytes": 5.0})
@example(arguments={"relative_path": "ok.txt", "offset": MAX_OFFSET})
@example(arguments={"relative_path": "ok.txt", "encoding": "Latin-1"})
def test_accepting_arguments_is_json_mode_validation(
    read_spec: Any, arguments: dict[str, Any]
) -> None:
    if not _surrogate_free(arguments):
        return
    accepted = _wire.accept(SandboxFSReadParams, arguments)
    try:
        validated = read_spec.parse_arguments(arguments)
    except PolicyViolation:
        assert accepted is None
    else:
        assert accepted == validated


# --- rendering results ---------------------------------------------------------------------


def both_checks(spec: Any, result: Any, render: Any = _wire.render) -> tuple[Any, Any]:
    """The full path's check and the inline render of one result: output or refusal each.

    A field of the wrong type makes Pydantic warn while it serialises, in both; the warning
    is not what is compared.
    """
    outcomes: list[Any] = []
    for check in (spec.check_result, render):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                output = check(result)
            except OutputContractError:
                outcomes.append("refused")
            else:
                outcomes.append((output.structured, output.text))
    return outcomes[0], outcomes[1]


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@given(
    path=texts,
    content=texts,
    numbers=st.tuples(*[st.integers(-5, MAX_OFFSET + 5)] * 3),
    truncated=st.one_of(st.booleans(), st.integers(0, 1), st.none()),
)
@example(path="ok.txt", content='a\x00\u2028\U0001f600"\\', numbers=(0, 3, 3), truncated=False)
def test_rendering_a_read_result_is_the_full_path_check(
    read_spec: Any, path: str, content: str, numbers: tuple[int, int, int], truncated: Any
) -> None:
    offset, bytes_read, next_offset = numbers
    fields = {
        "resolved_path": path,
        "content": content,
        "offset": offset,
        "bytes_read": bytes_read,
        "next_offset": next_offset,
        "truncated": truncated,
    }
    result = SandboxFSReadResult.model_construct(**fields)
    expected, rendered = both_checks(read_spec, result)
    assert rendered == expected
    # The read's own renderer, from the fields the inline path builds.
    assert both_checks(read_spec, result, render=lambda _: _wire.render_read(fields)) == (
        expected,
        expected,
    )


@given(names=st.lists(texts, max_size=4), size=st.one_of(st.none(), st.integers(-2, 5)))
def test_rendering_a_listing_is_the_full_path_check(
    list_spec: Any, names: list[str], size: int | None
) -> None:
    entries = [
        SandboxFSEntry.model_construct(name=name, type="file", size=size, modified=None)
        for name in names
    ]
    result = SandboxFSListResult.model_construct(
        resolved_path=".", entries=entries, truncated=False, unnamed_entries=0
    )
    expected, rendered = both_checks(list_spec, result)
    assert rendered == expected


# --- reading -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    return ensure_complete(build_fs_tree(tmp_path_factory.mktemp("inline") / "base"))


@pytest.fixture(scope="module")
def tools(tree: FSTree) -> Iterator[FileTools]:
    with file_tools(tree.root, "kernel") as built:
        yield built


@pytest.fixture(scope="module")
def read_spec(tools: FileTools) -> Any:
    return tools.read


@pytest.fixture(scope="module")
def list_spec(tools: FileTools) -> Any:
    return tools.list


def outcome(function: Any, params: SandboxFSReadParams) -> Any:
    try:
        result = function(params)
    except ToolFailure as failure:
        return failure.problem.as_dict()
    if result is None or isinstance(result, dict):
        return result
    return result.model_dump()


paths = st.one_of(
    st.sampled_from(
        [
            "ok.txt",
            "sub/inner.txt",
            "sub/deeper/../inner.txt",
            "link_in",
            "missing",
            "fifo",
            "null_dev",
            "sub",
            "..",
            "../outside/secret.txt",
            "ok.txt/",
            "big.txt",
            "binary.bin",
            "empty.txt",
            "{ROOT}/ok.txt",
            "/etc/passwd",
        ]
    ),
    st.text(alphabet="ok.txsub/.", min_size=1, max_size=12),
)


@given(
    path=paths,
    encoding=st.sampled_from(["utf-8", "latin-1", "utf-16", "ascii", "iso2022_jp"]),
    max_bytes=st.sampled_from([1, 2, 5, 1000, INLINE_MAX_BYTES, INLINE_MAX_BYTES + 1]),
    offset=st.sampled_from([0, 1, 3, 70_000]),
)
def test_reading_now_gives_what_reading_in_a_thread_gives(  # noqa: PLR0917 - Hypothesis
    tools: FileTools, tree: FSTree, path: str, encoding: str, max_bytes: int, offset: int
) -> None:
    params = SandboxFSReadParams(
        relative_path=tree.expand(path), encoding=encoding, max_bytes=max_bytes, offset=offset
    )
    now = outcome(tools.reader.read_now, params)
    later = outcome(tools.reader.read_blocking, params)
    if now is not None:
        assert now == later


def test_the_common_read_is_answered_inline(tools: FileTools) -> None:
    # The shortcut must actually serve the plain case, or it proves nothing.
    params = SandboxFSReadParams(relative_path="sub/inner.txt")
    assert tools.reader.read_now(params) == tools.reader.read_blocking(params).model_dump()
    output = tools.reader.read_inline({"relative_path": "sub/inner.txt"})
    assert output is not None
    assert output.structured["content"] == "inner\n"


@pytest.mark.parametrize(
    ("path", "arguments"),
    [
        ("link_in", {}),  # a symbolic link: named by the walk, in a worker thread
        ("big.txt", {"max_bytes": INLINE_MAX_BYTES + 1}),  # more than the loop may read
        ("ok.txt", {"encoding": "utf-16", "offset": 2}),  # the mark needs a second read
        ("../outside/secret.txt", {}),  # '..' at the root: the caches cannot answer it
    ],
)
def test_what_is_left_to_a_worker_thread(
    tools: FileTools, path: str, arguments: dict[str, Any]
) -> None:
    assert tools.reader.read_now(SandboxFSReadParams(relative_path=path, **arguments)) is None
    assert tools.reader.read_inline({"relative_path": path, **arguments}) is None


def test_bad_arguments_are_left_to_the_full_path(tools: FileTools) -> None:
    assert tools.reader.read_inline({"relative_path": "ok.txt", "max_bytes": "9"}) is None


# --- where the inline path never runs ------------------------------------------------------


def reader_over(root: Path, **overrides: Any) -> FileReader:
    opened = open_root(root)
    probed = Resolver.probe(opened, cross_mounts=False)
    settings: dict[str, Any] = {
        "cross_mounts": False,
        "kernel": probed.kernel,
        "cached": probed.cached,
        "proc_reopen": probed.proc_reopen,
        "root_status": os.stat(root),
        "mounts": probed.mounts,
        "root_filesystem": probed.root_filesystem,
        "protected_symlinks": False,
        **overrides,
    }
    return FileReader(Resolver(opened, **settings))


@pytest.mark.parametrize(
    "overrides",
    [
        {"root_filesystem": "nfs"},
        {"root_filesystem": "fuse"},
        {"root_filesystem": "overlay"},
        {"root_filesystem": "0x12345678"},
        {"cross_mounts": True},
        {"cached": False},
        {"proc_reopen": False},
        {"kernel": False},
    ],
)
def test_a_file_system_that_can_hang_is_never_read_on_the_loop(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    reader = reader_over(tmp_path, **overrides)
    assert not reader.reads_inline
    assert reader.read_now(SandboxFSReadParams(relative_path="f")) is None


@pytest.mark.parametrize(("filesystem", "in_memory"), [("ext4", False), ("tmpfs", True)])
def test_local_file_systems_are_read_on_the_loop(
    tmp_path: Path, filesystem: str, in_memory: bool
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    reader = reader_over(tmp_path, root_filesystem=filesystem)
    assert reader.reads_inline
    assert reader._in_memory is in_memory
    result = reader.read_now(SandboxFSReadParams(relative_path="f"))
    assert result is not None
    assert result["content"] == "x"


def test_data_not_in_the_page_cache_goes_to_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"some text")
    reader = reader_over(tmp_path, root_filesystem="ext4")
    real = os.preadv
    answers: Iterator[OSError | int] = iter([OSError(11, "EAGAIN"), 4])

    def not_cached(fd: int, buffers: list[Any], offset: int, *flags: int) -> int:
        answer = next(answers)
        if not isinstance(answer, int):
            raise answer
        # A short read that ends before the file does: the rest was not in the cache.
        real(fd, buffers, offset, *flags)
        return answer

    monkeypatch.setattr(os, "preadv", not_cached)
    params = SandboxFSReadParams(relative_path="f")
    assert reader.read_now(params) is None
    assert reader.read_now(params) is None
    assert reader.reads_inline


@pytest.mark.parametrize(
    ("before", "after", "max_bytes"),
    [
        # On main: looked up at 60,000 bytes, read at 68,192 with max_bytes 100,000, the
        # inline buffer's 65,537 bytes were answered as the whole file, a size it never had.
        (60_000, 68_192, 100_000),
        (10, 68_192, 100_000),
        (60_000, 65_537, 65_537),
        # Shrunk under the read: the bytes read are those of a size the file had.
        (68_192, 100, 100_000),
        (100, 50, 100_000),
    ],
)
def test_a_writer_never_makes_the_inline_path_answer_a_size_the_file_never_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: int, after: int, max_bytes: int
) -> None:
    (tmp_path / "f").write_bytes(b"a" * before)
    reader = reader_over(tmp_path, root_filesystem="ext4")
    real = reader._resolver.reopen

    def rewritten(resolved: Any, flags: int) -> int:
        # After the lookup took the file's size, before the read.
        (tmp_path / "f").write_bytes(b"b" * after)
        return real(resolved, flags)

    monkeypatch.setattr(reader._resolver, "reopen", rewritten)
    params = SandboxFSReadParams(relative_path="f", max_bytes=max_bytes)
    fields = reader.read_now(params)
    if fields is None:
        return
    end = fields["offset"] + fields["bytes_read"]
    assert end == min(after, max_bytes)
    assert fields["truncated"] is (after > max_bytes)


def test_a_short_read_is_the_end_only_where_the_file_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"x" * 1000)
    reader = reader_over(tmp_path, root_filesystem="ext4")
    monkeypatch.setattr(reader, "_read_cached", lambda fd, count, offset: b"x" * 10)
    assert reader.read_now(SandboxFSReadParams(relative_path="f")) is None
    monkeypatch.setattr(reader, "_read_cached", lambda fd, count, offset: b"x" * 1000)
    fields = reader.read_now(SandboxFSReadParams(relative_path="f"))
    assert fields is not None
    assert (fields["bytes_read"], fields["truncated"]) == (1000, False)


def test_a_file_system_without_nowait_reads_turns_the_inline_path_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    reader = reader_over(tmp_path, root_filesystem="ext4")

    def unsupported(*args: Any) -> int:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "preadv", unsupported)
    assert reader.read_now(SandboxFSReadParams(relative_path="f")) is None
    assert not reader.reads_inline


def test_other_read_errors_inline_are_refused_as_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    reader = reader_over(tmp_path, root_filesystem="ext4")

    def broken(*args: Any) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "preadv", broken)
    with pytest.raises(ToolFailure) as info:
        reader.read_now(SandboxFSReadParams(relative_path="f"))
    assert info.value.problem.code.value == "MCP_INTERNAL_ERROR"
