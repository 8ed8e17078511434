"""`sandbox_fs_read`: the contract, the steps of a read, and the round 1 path vectors.

The cases run against the round 1 fixture (`tests/support/fs_tree.py`), with both resolvers:
the kernel's `openat2` and the walk. Decoding, offsets and the response bound are checked on
files made for each case. This module is also what the mutation checks run: dropping
`O_NOFOLLOW` from the walk, letting the kernel follow magic links or cross mounts, or reading
a special file each make it fail.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import (
    DEFAULT_MAX_BYTES,
    MAX_MAX_BYTES,
    MAX_OFFSET,
    MAX_PATH_CHARS,
    SandboxFSReadParams,
    SandboxFSReadResult,
)
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools import build_registry
from mcp_server_suite.tools.fs import read as read_module
from mcp_server_suite.tools.fs._refusals import MAX_ECHO_CHARS
from mcp_server_suite.tools.fs.codecs import _TABLE, Kind, text_codec
from mcp_server_suite.tools.fs.read import MAX_RESPONSE_BYTES, build_read_tool
from tests.support.fs_tools import (
    MODES,
    FileTools,
    as_nobody,
    call,
    complete,
    file_tools,
    reader_of,
    response_bytes,
)
from tests.support.fs_tree import (
    BIG_FILE_BYTES,
    OUTSIDE_SECRETS,
    FSTree,
    build_fs_tree,
    ensure_complete,
)

ACCESS = MCPErrorCode.ACCESS_DENIED
INVALID = MCPErrorCode.VALIDATION_ERROR
INTERNAL = MCPErrorCode.INTERNAL_ERROR

OUTSIDE = "resolves outside the sandbox"
LOOP = "meets more than 40 symbolic links (a loop), or a /proc link the sandbox never follows"
SPECIAL = "is not a regular file (it is a FIFO, socket or device) and is not opened"
MISSING = "does not exist"
NOT_A_DIRECTORY = "has a component that is not a directory"
DIRECTORY = "names a directory, not a file"
TOO_LONG = "has a name, or resolves to a path, longer than the file system or the sandbox allows"
PERMISSION = "cannot be read: permission denied"
CHANGED = "changed while it was being read; try again"


# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    # CI runs as root, so the device and the socket are always made: nothing may skip.
    return ensure_complete(build_fs_tree(tmp_path_factory.mktemp("fs") / "base"))


@pytest.fixture(scope="module", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def tools(tree: FSTree, mode: str) -> Iterator[FileTools]:
    with file_tools(tree.root, mode) as built:
        yield built


def read(tools: FileTools, path: str, **arguments: Any) -> dict[str, Any]:
    answer = call(tools.read, {"relative_path": path, **arguments})
    assert isinstance(answer, dict), answer.detail
    return answer


def refusal(tools: FileTools, path: str, **arguments: Any) -> Problem:
    answer = call(tools.read, {"relative_path": path, **arguments})
    assert isinstance(answer, Problem), answer
    return answer


def assert_no_host_path(problem: Problem, tree: FSTree) -> None:
    text = problem.as_text()
    for host_path in (tree.base, tree.root, tree.outside):
        assert str(host_path) not in text


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def scratch(tmp_path: Path, mode: str) -> Iterator[tuple[FileTools, Path]]:
    with file_tools(tmp_path, mode) as built:
        yield built, tmp_path


@pytest.fixture
def kernel_scratch(tmp_path: Path) -> Iterator[tuple[FileTools, Path]]:
    # For what happens after the lookup (the response bound), one resolver is enough.
    with file_tools(tmp_path, "kernel") as built:
        yield built, tmp_path


# --- the round 1 path vectors --------------------------------------------------------------

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "path.json").read_text("utf-8")
)

# The design document wins over the corpus (tests/vectors/README.md): symlinks and '..'
# that resolve inside the sandbox are followed.
SPEC_OVERRIDES = {"PATH-072": "run", "PATH-008": "run"}

# The problem each rejected vector gets; the corpus says only "reject".
REJECT_CODES = {
    "PATH-018": ACCESS,
    "PATH-021": ACCESS,
    "PATH-024": ACCESS,
    "PATH-027": ACCESS,
    "PATH-066": INVALID,
    "PATH-041": INVALID,
    "PATH-044": INVALID,
    "PATH-050": INVALID,
    "PATH-053": INVALID,
    "PATH-056": INVALID,
    "PATH-059": INVALID,
    "PATH-082": INVALID,
    "PATH-085": ACCESS,
    "PATH-063": INVALID,
    "PATH-032": INVALID,
    "PATH-069": ACCESS,
    "PATH-075": ACCESS,
    "PATH-078": ACCESS,
    "PATH-005": ACCESS,
    "PATH-011": ACCESS,
}


def test_every_vector_has_an_expectation() -> None:
    ids = {vector["id"] for vector in VECTORS}
    expected_rejects = {
        v["id"] for v in VECTORS if SPEC_OVERRIDES.get(v["id"], v["expect"]) == "reject"
    }
    assert set(REJECT_CODES) == expected_rejects
    assert set(SPEC_OVERRIDES) <= ids
    assert len(VECTORS) == 29


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_corpus_vector(vector: dict[str, Any], tree: FSTree, tools: FileTools) -> None:
    expect = SPEC_OVERRIDES.get(vector["id"], vector["expect"])
    payload = tree.expand(vector["payload"])
    answer = call(tools.read, {"relative_path": payload})
    if expect == "run":
        assert isinstance(answer, dict), answer
        target = Path(os.path.realpath(os.path.join(tree.root, payload)))
        expected = target.read_bytes()[:DEFAULT_MAX_BYTES]
        assert answer["content"] == expected.decode("utf-8")
        assert answer["bytes_read"] == len(expected)
        assert answer["resolved_path"] == str(target.relative_to(tree.root))
        assert not any(secret.decode() in json.dumps(answer) for secret in OUTSIDE_SECRETS)
    else:
        assert isinstance(answer, Problem), answer
        assert answer.code is REJECT_CODES[vector["id"]]
        assert_no_host_path(answer, tree)


@pytest.mark.parametrize("max_bytes", [DEFAULT_MAX_BYTES, MAX_MAX_BYTES])
def test_big_file_is_truncated_at_the_cap(tools: FileTools, max_bytes: int) -> None:
    # PATH-088: the corpus observed 1,048,576 characters and truncated=True at the 1 MiB cap.
    result = read(tools, "big.txt", max_bytes=max_bytes)
    assert result["content"] == "a" * max_bytes
    assert (result["bytes_read"], result["next_offset"], result["truncated"]) == (
        max_bytes,
        max_bytes,
        True,
    )
    assert max_bytes < BIG_FILE_BYTES


# --- outcomes, table-driven --------------------------------------------------------------

RUNS = [
    # (path, resolved_path, content)
    ("ok.txt", "ok.txt", "hello\n"),
    ("./ok.txt", "ok.txt", "hello\n"),
    ("sub//deeper/./d.txt", "sub/deeper/d.txt", "deep\n"),
    ("link_in", "ok.txt", "hello\n"),
    ("link_in_dir/inner.txt", "sub/inner.txt", "inner\n"),
    ("link_in_dir/deeper/../inner.txt", "sub/inner.txt", "inner\n"),
    # '..' after a symbolic link goes to the parent of where the link led.
    ("link_in_dir/../ok.txt", "ok.txt", "hello\n"),
    ("sub/deeper/../../ok.txt", "ok.txt", "hello\n"),
    ("...", "...", "three dots\n"),
    ("..foo", "..foo", "dotdot prefix\n"),
    ("foo..", "foo..", "dotdot suffix\n"),
    ("Case.txt", "Case.txt", "Case\n"),
    ("caf\u00e9.txt", "caf\u00e9.txt", "cafe nfc\n"),
    ("new\nline.txt", "new\nline.txt", "newline name\n"),
    ("%2e%2e/literal.txt", "%2e%2e/literal.txt", "literal percent dir\n"),
    ("empty.txt", "empty.txt", ""),
    ("{ROOT}/sub/inner.txt", "sub/inner.txt", "inner\n"),
    ("{ROOT}//sub/./inner.txt", "sub/inner.txt", "inner\n"),
    ("{ROOT}/link_in", "ok.txt", "hello\n"),
    # POSIX leaves a leading '//' implementation-defined; Linux reads it as '/'.
    ("/{ROOT}/./ok.txt", "ok.txt", "hello\n"),
    # Residual risk, pinned: a hard link to an outside file is an ordinary file inside.
    ("hard_out", "hard_out", "hardlinked secret\n"),
]


@pytest.mark.parametrize(("path", "resolved", "content"), RUNS)
def test_reads(tools: FileTools, tree: FSTree, path: str, resolved: str, content: str) -> None:
    size = len(content.encode())
    assert read(tools, tree.expand(path)) == {
        "resolved_path": resolved,
        "content": content,
        "offset": 0,
        "bytes_read": size,
        "next_offset": size,
        "truncated": False,
    }


REFUSALS = [
    # (path, code, detail phrase)
    ("../outside/secret.txt", ACCESS, OUTSIDE),
    ("../outside/does_not_exist", ACCESS, OUTSIDE),
    ("..", ACCESS, OUTSIDE),
    ("../", ACCESS, OUTSIDE),
    ("sub/../..", ACCESS, OUTSIDE),
    ("sub/../../outside/secret.txt", ACCESS, OUTSIDE),
    ("../root_evil/secret.txt", ACCESS, OUTSIDE),
    ("../root_evil/does_not_exist", ACCESS, OUTSIDE),
    # A route that leaves the root and comes back is refused: nothing outside is consulted.
    ("../root/ok.txt", ACCESS, OUTSIDE),
    ("../root/../outside/secret.txt", ACCESS, OUTSIDE),
    ("link_dir_out/../root/ok.txt", ACCESS, OUTSIDE),
    ("link_out", ACCESS, OUTSIDE),
    ("link_out_rel", ACCESS, OUTSIDE),
    ("link_dir_out/secret.txt", ACCESS, OUTSIDE),
    ("link_dir_out/does_not_exist", ACCESS, OUTSIDE),
    ("link_dir_out", ACCESS, OUTSIDE),
    ("link_evil/secret.txt", ACCESS, OUTSIDE),
    ("dangling_out", ACCESS, OUTSIDE),
    ("zero", ACCESS, OUTSIDE),
    ("proc_root/etc/passwd", ACCESS, OUTSIDE),
    ("{BASE}/outside/secret.txt", ACCESS, OUTSIDE),
    ("{BASE}/root_evil/secret.txt", ACCESS, OUTSIDE),
    ("{ROOT}_evil/secret.txt", ACCESS, OUTSIDE),
    ("{ROOT}/../outside/secret.txt", ACCESS, OUTSIDE),
    ("{ROOT}/../root/ok.txt", ACCESS, OUTSIDE),
    ("{BASE}/root_via_link/ok.txt", ACCESS, OUTSIDE),
    ("/proc/self/cwd/ok.txt", ACCESS, OUTSIDE),
    ("/etc/passwd", ACCESS, OUTSIDE),
    ("/", ACCESS, OUTSIDE),
    ("fifo", ACCESS, SPECIAL),
    ("sock", ACCESS, SPECIAL),
    ("null_dev", ACCESS, SPECIAL),
    ("loop_a", ACCESS, LOOP),
    ("loop_b", ACCESS, LOOP),
    ("self_loop", ACCESS, LOOP),
    ("loop_a/x", ACCESS, LOOP),
    ("loop_a/../ok.txt", ACCESS, LOOP),
    ("self_loop/x/y", ACCESS, LOOP),
    ("missing.txt", INVALID, MISSING),
    ("sub/missing.txt", INVALID, MISSING),
    ("missing_dir/x.txt", INVALID, MISSING),
    ("missing/../ok.txt", INVALID, MISSING),
    ("dangling", INVALID, MISSING),
    ("case.txt", INVALID, MISSING),
    ("ok.txt/x", INVALID, NOT_A_DIRECTORY),
    ("ok.txt/", INVALID, NOT_A_DIRECTORY),
    ("ok.txt/.", INVALID, NOT_A_DIRECTORY),
    ("ok.txt/..", INVALID, NOT_A_DIRECTORY),
    ("ok.txt/../ok.txt", INVALID, NOT_A_DIRECTORY),
    ("link_in/", INVALID, NOT_A_DIRECTORY),
    ("fifo/", INVALID, NOT_A_DIRECTORY),
    ("{ROOT}/ok.txt/.", INVALID, NOT_A_DIRECTORY),
    ("sub", INVALID, DIRECTORY),
    ("sub/", INVALID, DIRECTORY),
    ("sub/..", INVALID, DIRECTORY),
    (".", INVALID, DIRECTORY),
    ("dir_only", INVALID, DIRECTORY),
    ("link_in_dir", INVALID, DIRECTORY),
    ("%2e%2e", INVALID, DIRECTORY),
    ("{ROOT}", INVALID, DIRECTORY),
    ("{ROOT}/", INVALID, DIRECTORY),
    ("{ROOT}/sub", INVALID, DIRECTORY),
    ("a" * 256, INVALID, TOO_LONG),
    ("sub/" + "a" * 256 + "/x.txt", INVALID, TOO_LONG),
]


@pytest.mark.parametrize(("path", "code", "phrase"), REFUSALS)
def test_refusals(
    tools: FileTools, tree: FSTree, path: str, code: MCPErrorCode, phrase: str
) -> None:
    payload = tree.expand(path)
    problem = refusal(tools, payload)
    subject = "The absolute path" if payload.startswith("/") else quote(payload, MAX_ECHO_CHARS)
    assert problem.code is code
    assert problem.detail == f"{subject} {phrase}"
    assert problem.invalid_params == ("relative_path",)
    assert_no_host_path(problem, tree)


def test_problem_matches_the_design_document(tools: FileTools) -> None:
    # The in-band error shown in the design document's "Error model", byte for byte.
    assert refusal(tools, "../../etc/passwd").as_text() == (
        '{"type": "urn:mcp-server-suite:problem:access-denied", "title": "Access to the '
        'requested resource is denied", "status": 403, "detail": "\'../../etc/passwd\' '
        'resolves outside the sandbox", "code": "MCP_ACCESS_DENIED", "invalid_params": '
        '["relative_path"], "metadata": {}}'
    )


def test_long_path_echo_is_cut_at_256_characters(tools: FileTools) -> None:
    path = "../" + "x" * 400
    assert refusal(tools, path).detail == f"{path[:256]!r} (cut at 256 characters) {OUTSIDE}"


def test_echo_escapes_what_the_sanitizer_would_refuse(tree: FSTree, mode: str) -> None:
    # Without the sanitizer in front, an escape or bidi override still cannot reach a
    # client's display unescaped.
    with file_tools(tree.root, mode) as built:
        problem = _refused_directly(built, "../\u202e\x1b[31m")
    assert "\u202e" not in problem.detail
    assert "\x1b" not in problem.detail
    assert problem.detail.startswith("'../\\u202e\\x1b[31m'")


def _refused_directly(tools: FileTools, path: str) -> Problem:
    reader = tools.reader
    with pytest.raises(ToolFailure) as info:
        reader.read_blocking(SandboxFSReadParams(relative_path=path))
    return info.value.problem


def test_undecodable_content_names_the_encoding(tools: FileTools) -> None:
    problem = refusal(tools, "binary.bin")
    assert problem.code is INVALID
    assert problem.invalid_params == ("encoding",)
    assert problem.detail == "'binary.bin' holds bytes that are not valid utf-8 text"


def test_binary_reads_as_latin_1(tools: FileTools) -> None:
    result = read(tools, "binary.bin", encoding="latin-1")
    assert result["content"] == b"\xff\xfe\x00\x01binary\x80".decode("latin-1")
    assert result["bytes_read"] == 11


def test_no_descriptor_leaks(tools: FileTools, tree: FSTree) -> None:
    before = open_descriptors()
    for path, *_ in RUNS + REFUSALS:
        call(tools.read, {"relative_path": tree.expand(path)})
    read(tools, "big.txt", max_bytes=MAX_MAX_BYTES)
    assert open_descriptors() == before


# --- arguments ---------------------------------------------------------------------------

BAD_ARGUMENTS = [
    pytest.param({"relative_path": ""}, "relative_path", id="empty-path"),
    pytest.param({"relative_path": "a" * (MAX_PATH_CHARS + 1)}, "relative_path", id="long-path"),
    pytest.param({"relative_path": "ok.txt\x00"}, "relative_path", id="nul"),
    pytest.param({"relative_path": "\udcff.txt"}, "relative_path", id="surrogate-escape"),
    pytest.param({"relative_path": "a\ud800"}, "relative_path", id="lone-surrogate"),
    pytest.param({"relative_path": 7}, "relative_path", id="path-not-string"),
    pytest.param({"relative_path": "ok.txt", "max_bytes": 0}, "max_bytes", id="zero-bytes"),
    pytest.param(
        {"relative_path": "ok.txt", "max_bytes": MAX_MAX_BYTES + 1}, "max_bytes", id="over-cap"
    ),
    pytest.param({"relative_path": "ok.txt", "max_bytes": "5"}, "max_bytes", id="string-int"),
    pytest.param({"relative_path": "ok.txt", "max_bytes": 5.5}, "max_bytes", id="fraction"),
    pytest.param({"relative_path": "ok.txt", "max_bytes": True}, "max_bytes", id="bool-int"),
    pytest.param({"relative_path": "ok.txt", "offset": -1}, "offset", id="negative-offset"),
    pytest.param(
        {"relative_path": "ok.txt", "offset": MAX_OFFSET + 1}, "offset", id="offset-past-ijson"
    ),
    pytest.param({"relative_path": "ok.txt", "offset": "0"}, "offset", id="string-offset"),
    pytest.param({"relative_path": "ok.txt", "offset": False}, "offset", id="bool-offset"),
    pytest.param({"relative_path": "ok.txt", "encoding": "utf-7"}, "encoding", id="utf-7"),
    pytest.param({"relative_path": "ok.txt", "extra": 1}, "extra", id="unknown-member"),
    pytest.param({}, "relative_path", id="missing-path"),
]


@pytest.mark.parametrize(("arguments", "field"), BAD_ARGUMENTS)
def test_argument_model_refuses(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        SandboxFSReadParams.model_validate(arguments)
    assert {error["loc"][0] for error in info.value.errors()} == {field}


@pytest.mark.parametrize("path", ["\udcff.txt", "a\ud800", "\udfff"])
def test_lone_surrogates_never_reach_the_file_system(path: str) -> None:
    # os.fsencode would turn U+DC80..U+DCFF into raw bytes (surrogateescape); the model
    # relies on pydantic refusing every lone surrogate in a str field, and this pins it.
    with pytest.raises(ValidationError) as info:
        SandboxFSReadParams(relative_path=path)
    assert [error["type"] for error in info.value.errors()] == ["string_unicode"]


def test_argument_model_in_json_mode_is_strict() -> None:
    params = SandboxFSReadParams.model_validate_json('{"relative_path": "ok.txt"}')
    assert (params.encoding, params.max_bytes, params.offset) == ("utf-8", DEFAULT_MAX_BYTES, 0)
    with pytest.raises(ValidationError):
        SandboxFSReadParams.model_validate_json('{"relative_path": "ok.txt", "max_bytes": "9"}')


def test_encoding_is_validated_to_its_canonical_name() -> None:
    assert SandboxFSReadParams(relative_path="x", encoding="Latin-1").encoding == "iso8859-1"


def test_models_are_frozen() -> None:
    params = SandboxFSReadParams(relative_path="ok.txt")
    with pytest.raises(ValidationError):
        params.relative_path = "../x"  # type: ignore[misc]  # The point: assignment is refused.


def test_argument_refusals_through_the_guardrails(tools: FileTools) -> None:
    answer = call(tools.read, {"relative_path": "ok.txt", "encoding": "rot13"})
    assert isinstance(answer, Problem)
    assert (answer.code, answer.invalid_params) == (INVALID, ("encoding",))
    assert "bytes-to-bytes" in answer.detail


# --- decoding, offsets and byte counting ---------------------------------------------------

EURO = "\u20ac".encode()  # three bytes in UTF-8
GRIN_16LE = "\U0001f600".encode("utf-16-le")  # a surrogate pair: 3D D8 00 DE
DECODES = [
    # (file bytes, encoding, max_bytes, offset, (content, offset, bytes_read, truncated))
    pytest.param(b"abc", "utf-8", 3, 0, ("abc", 0, 3, False), id="exactly-max"),
    pytest.param(b"abcd", "utf-8", 3, 0, ("abc", 0, 3, True), id="one-over"),
    pytest.param(b"caf\xc3\xa9", "utf-8", 4, 0, ("caf", 0, 3, True), id="two-byte-cut"),
    pytest.param(b"caf\xc3\xa9", "utf-8", 5, 0, ("caf\u00e9", 0, 5, False), id="two-byte-whole"),
    pytest.param(b"ok" + EURO, "utf-8", 3, 0, ("ok", 0, 2, True), id="three-byte-cut-1"),
    pytest.param(b"ok" + EURO, "utf-8", 4, 0, ("ok", 0, 2, True), id="three-byte-cut-2"),
    pytest.param(EURO + b"!", "utf-8", 3, 0, ("\u20ac", 0, 3, True), id="three-byte-at-cap"),
    pytest.param(b"\xf0\x9f\x98\x80", "utf-8", 3, 0, ("", 0, 0, True), id="four-byte-cut"),
    pytest.param(b"ok\xffmore", "utf-8", 2, 0, ("ok", 0, 2, True), id="bad-byte-beyond-cap"),
    # A piece that starts inside a character skips the rest of it.
    pytest.param(b"a" + EURO + b"b", "utf-8", 10, 2, ("b", 4, 1, False), id="utf8-start-cut"),
    pytest.param(b"a" + EURO + b"b", "utf-8", 10, 1, ("\u20acb", 1, 4, False), id="utf8-start"),
    pytest.param(
        b"\xf0\x9f\x98\x80z", "utf-8", 2, 1, ("", 4, 0, True), id="utf8-start-cut-no-room"
    ),
    # A window smaller than the next character holds none of it, and makes no progress.
    pytest.param(b"\xc3\xa9", "utf-8", 1, 0, ("", 0, 0, True), id="window-under-one-char"),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 5, 0, ("ok", 0, 5, False), id="sig-whole"),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 2, 0, ("", 0, 0, True), id="sig-half-bom"),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 4, 0, ("o", 0, 4, True), id="sig-one-char"),
    # The signature is dropped only at the start of the file.
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 9, 1, ("ok", 3, 2, False), id="sig-offset"),
    pytest.param(
        b"ab\xef\xbb\xbf", "utf-8-sig", 9, 2, ("\ufeff", 2, 3, False), id="sig-not-at-start"
    ),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 6, 0, ("hi", 0, 6, False), id="utf16-bom"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 5, 0, ("h", 0, 4, True), id="utf16-half-unit"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 2, 0, ("", 0, 2, True), id="utf16-bom-only"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 1, 0, ("", 0, 0, True), id="utf16-half-bom"),
    pytest.param(b"\xfe\xff\x00h\x00i", "utf-16", 6, 0, ("hi", 0, 6, False), id="utf16-be-bom"),
    # After offset 0, the byte order still comes from the mark at the start of the file.
    pytest.param(b"\xfe\xff\x00h\x00i", "utf-16", 6, 4, ("i", 4, 2, False), id="utf16-be-at-4"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 6, 3, ("i", 4, 2, False), id="utf16-odd"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 6, 1, ("hi", 2, 4, False), id="utf16-in-bom"),
    pytest.param(GRIN_16LE + b"!\x00", "utf-16-le", 3, 0, ("", 0, 0, True), id="utf16-pair-cut"),
    pytest.param(GRIN_16LE + b"!\x00", "utf-16-le", 10, 2, ("!", 4, 2, False), id="utf16-low-half"),
    pytest.param(
        "\U0001f600!".encode("utf-16-be"), "utf-16-be", 10, 2, ("!", 4, 2, False), id="be-low"
    ),
    pytest.param(
        "ab".encode("utf-32"), "utf-32", 12, 5, ("b", 8, 4, False), id="utf32-aligned-from-mark"
    ),
    pytest.param(
        "\u65e5\u672c".encode("shift_jis"), "shift_jis", 3, 0, ("\u65e5", 0, 2, True), id="sjis"
    ),
    # Stateful codecs: an escape sequence is consumed (counted) even when no character
    # follows it, and a shift sequence cut by the cap is held back whole.
    pytest.param(b"\x1b$BF|K\\\x1b(B", "iso2022_jp", 2, 0, ("", 0, 0, True), id="iso2022-cut"),
    pytest.param(b"\xff\xfe\x00", "latin-1", 2, 0, ("\xff\xfe", 0, 2, True), id="latin-1"),
    pytest.param(b"abcdef", "latin-1", 2, 3, ("de", 3, 2, True), id="latin-1-offset"),
    pytest.param(b"", "utf-16", 1, 0, ("", 0, 0, False), id="empty-utf16"),
    pytest.param(b"abc", "utf-8", 5, 3, ("", 3, 0, False), id="offset-at-end"),
    pytest.param(b"abc", "utf-8", 5, 10, ("", 10, 0, False), id="offset-past-end"),
]


@pytest.mark.parametrize(("data", "encoding", "max_bytes", "offset", "expected"), DECODES)
def test_decoding(  # noqa: PLR0917 - one parameter per column of the table
    scratch: tuple[FileTools, Path],
    data: bytes,
    encoding: str,
    max_bytes: int,
    offset: int,
    expected: tuple[str, int, int, bool],
) -> None:
    tools, directory = scratch
    (directory / "f").write_bytes(data)
    result = read(tools, "f", encoding=encoding, max_bytes=max_bytes, offset=offset)
    content, start, bytes_read, truncated = expected
    assert (result["content"], result["offset"], result["bytes_read"], result["truncated"]) == (
        content,
        start,
        bytes_read,
        truncated,
    )
    assert result["next_offset"] == start + bytes_read


UNDECODABLE = [
    # (file bytes, encoding, max_bytes, offset)
    pytest.param(b"ok\xff", "utf-8", 100, 0, id="bad-byte"),
    pytest.param(b"ok\xe2\x82", "utf-8", 100, 0, id="cut-at-end-of-file"),
    pytest.param(b"ok\xe2\x82", "utf-8", 4, 0, id="cut-at-end-of-file-and-cap"),
    pytest.param(b"\xed\xa0\x80", "utf-8", 100, 0, id="encoded-surrogate"),
    pytest.param(b"\xc0\xaf", "utf-8", 100, 0, id="overlong-slash"),
    pytest.param(b"\x80abc", "utf-8", 100, 0, id="continuation-at-start-of-file"),
    pytest.param(b"a\x80\x80\x80\x80b", "utf-8", 100, 1, id="four-continuations"),
    pytest.param(b"\xff\xfea", "utf-16", 100, 0, id="odd-length"),
    pytest.param(b"\x00\xd8\x00\x00", "utf-16-le", 100, 0, id="utf16-lone-surrogate"),
    pytest.param(b"\x80", "ascii", 100, 0, id="ascii-high-bit"),
]


@pytest.mark.parametrize(("data", "encoding", "max_bytes", "offset"), UNDECODABLE)
def test_undecodable(
    scratch: tuple[FileTools, Path], data: bytes, encoding: str, max_bytes: int, offset: int
) -> None:
    tools, directory = scratch
    (directory / "f").write_bytes(data)
    problem = refusal(tools, "f", encoding=encoding, max_bytes=max_bytes, offset=offset)
    assert problem.code is INVALID
    assert problem.invalid_params == ("encoding",)
    assert problem.detail == f"'f' holds bytes that are not valid {encoding} text"


@pytest.mark.parametrize(("data", "encoding"), [(b"h\x00i\x00", "utf-16"), (b"x", "utf-32")])
@pytest.mark.parametrize("offset", [0, 2])
def test_utf16_and_utf32_need_a_byte_order_mark(
    scratch: tuple[FileTools, Path], data: bytes, encoding: str, offset: int
) -> None:
    # Decided: `utf-16` means "with a byte order mark". Without one the order is unknown
    # (Python would guess the CPU's), and the caller is told which names to use instead.
    tools, directory = scratch
    (directory / "f").write_bytes(data)
    problem = refusal(tools, "f", encoding=encoding, offset=offset)
    assert (problem.code, problem.invalid_params) == (INVALID, ("encoding",))
    assert problem.detail == (
        f"'f' does not start with a byte order mark, so its {encoding} byte order is "
        f"unknown: name {encoding}-le or {encoding}-be"
    )


@pytest.mark.parametrize("codec", [codec.name for codec in _TABLE if codec.kind is Kind.STATEFUL])
def test_stateful_codecs_are_read_from_offset_zero_only(
    scratch: tuple[FileTools, Path], codec: str
) -> None:
    tools, directory = scratch
    (directory / "f").write_bytes(b"abc")
    assert read(tools, "f", encoding=codec)["content"] == "abc"
    problem = refusal(tools, "f", encoding=codec, offset=1)
    assert (problem.code, problem.invalid_params) == (INVALID, ("offset",))
    assert problem.detail.startswith(f"{codec} is a stateful encoding")


@pytest.mark.parametrize("max_bytes", [4, 5, 7, 64])
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32-be", "latin-1", "gb18030"])
def test_reading_on_from_next_offset_gives_the_whole_text(
    scratch: tuple[FileTools, Path], encoding: str, max_bytes: int
) -> None:
    # Pieces chained by next_offset are the file's text, cut at character boundaries. A
    # piece must hold one character at least: 4 bytes do in every encoding here.
    tools, directory = scratch
    text = ("a\u00e9z" if encoding == "latin-1" else "a\u00e9\u20ac\U0001f600z") * 3
    (directory / "f").write_bytes(text.encode(encoding))
    pieces, offset = [], 0
    for _ in range(200):
        result = read(tools, "f", encoding=encoding, max_bytes=max_bytes, offset=offset)
        assert result["offset"] == offset
        pieces.append(result["content"])
        offset = result["next_offset"]
        if not result["truncated"]:
            break
    assert "".join(pieces) == text


def test_a_gigabyte_sparse_file_is_read_at_any_offset(scratch: tuple[FileTools, Path]) -> None:
    tools, directory = scratch
    with open(directory / "sparse", "wb") as sparse:
        sparse.truncate(1024**3)
    result = read(tools, "sparse", max_bytes=16, offset=1024**3 - 8)
    assert (result["content"], result["bytes_read"], result["truncated"]) == ("\x00" * 8, 8, False)


# --- the response is bounded, whatever the content ----------------------------------------


def worst_case_bytes(codec_name: str, size: int) -> bytes:
    """About `size` bytes of what costs the most on the wire per byte: NUL characters."""
    unit = len("\x00\x00".encode(codec_name)) - len("\x00".encode(codec_name))
    return ("\x00" * (size // unit - 4)).encode(codec_name)


# The bound is checked for every codec against a smaller response limit, which exercises the
# same cut at a tenth of the cost; the real limit is checked below on the corpus's case.
SCALED_RESPONSE_BYTES = 256 * 1024
SCALED_FILE_BYTES = 64 * 1024


@pytest.mark.parametrize("codec", [codec.name for codec in _TABLE])
def test_worst_case_response_is_bounded_for_every_codec(
    kernel_scratch: tuple[FileTools, Path], codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_module, "MAX_RESPONSE_BYTES", SCALED_RESPONSE_BYTES)
    tools, directory = kernel_scratch
    data = worst_case_bytes(codec, SCALED_FILE_BYTES)
    (directory / "f").write_bytes(data)
    arguments = {"relative_path": "f", "encoding": codec, "max_bytes": SCALED_FILE_BYTES}
    if text_codec(codec).kind is Kind.STATEFUL:
        # A stateful encoding is read in one piece or refused, never cut (no next piece
        # could start past offset 0).
        problem = call(tools.read, arguments)
        assert isinstance(problem, Problem)
        assert problem.invalid_params == ("max_bytes",)
        assert "is a stateful encoding, read only in one piece" in problem.detail
        return
    output = asyncio.run(_full_output(tools.read, arguments))
    result = output.structured
    size = response_bytes(result, output.text)
    assert size <= SCALED_RESPONSE_BYTES
    assert set(result["content"]) <= {"\x00"}
    if result["truncated"]:
        # Cut shorter than the bytes read; it says so and where to go on, and most of the
        # budget is used: the cut is not needlessly short.
        assert result["next_offset"] == result["bytes_read"] < len(data)
        assert size > SCALED_RESPONSE_BYTES * 0.9
    else:
        # UTF-32 spends four bytes on a NUL: the whole file fits.
        assert codec.startswith("utf-32")
        assert result["bytes_read"] == len(data)


async def _full_output(spec: Any, arguments: dict[str, Any]) -> Any:
    from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
    from mcp_server_suite.guardrails.pipeline import Guardrails

    return await Guardrails(limiter=ConcurrencyLimiter()).invoke(spec, arguments)


def test_nul_mebibyte_response_is_bounded(kernel_scratch: tuple[FileTools, Path]) -> None:
    # A172: 1 MiB of NUL bytes read with max_bytes 1,048,576 made a 13.6 MB response.
    tools, directory = kernel_scratch
    (directory / "nul").write_bytes(b"\x00" * MAX_MAX_BYTES)
    output = asyncio.run(
        _full_output(tools.read, {"relative_path": "nul", "max_bytes": MAX_MAX_BYTES})
    )
    assert response_bytes(output.structured, output.text) <= MAX_RESPONSE_BYTES
    first = output.structured
    assert first["truncated"] is True
    rest = read(tools, "nul", max_bytes=MAX_MAX_BYTES, offset=first["next_offset"])
    assert first["bytes_read"] + rest["bytes_read"] <= MAX_MAX_BYTES
    assert rest["offset"] == first["next_offset"]


@pytest.mark.parametrize(
    ("text", "encoding"),
    [("\U0001f600", "utf-8"), ("\u00e9", "latin-1"), ('"\\', "ascii"), ("\u65e5", "gb18030")],
)
def test_other_costly_content_is_bounded(
    kernel_scratch: tuple[FileTools, Path], text: str, encoding: str
) -> None:
    tools, directory = kernel_scratch
    data = text.encode(encoding) * (MAX_MAX_BYTES // len(text.encode(encoding)))
    (directory / "f").write_bytes(data)
    output = asyncio.run(
        _full_output(
            tools.read, {"relative_path": "f", "encoding": encoding, "max_bytes": MAX_MAX_BYTES}
        )
    )
    assert response_bytes(output.structured, output.text) <= MAX_RESPONSE_BYTES
    assert output.structured["content"] == data[: output.structured["bytes_read"]].decode(encoding)


def test_every_character_costs_at_most_the_stated_bound() -> None:
    # MAX_WIRE_BYTES_PER_CHAR is what the cheap check before the exact one relies on.
    costs = {read_module.wire_cost(chr(point)) - read_module.wire_cost("") for point in _points()}
    assert max(costs) == read_module.MAX_WIRE_BYTES_PER_CHAR


def _points() -> Iterator[int]:
    # Every BMP code point but the surrogates, and a sample of every plane above it.
    yield from range(0xD800)
    yield from range(0xE000, 0x10000)
    yield from range(0x10000, 0x110000, 97)


# --- OS errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [errno.EIO, errno.ESTALE, errno.EOVERFLOW])
def test_unexpected_errors_are_internal_and_generic(
    tools: FileTools, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: int
) -> None:
    def failing_reopen(resolved: Any, flags: int) -> int:
        raise OSError(error, f"{os.strerror(error)}: /secret/host/path")

    reader = tools.reader
    monkeypatch.setattr(reader._resolver, "reopen", failing_reopen)
    with caplog.at_level("WARNING", logger="mcp_server_suite.tools.fs"):
        problem = refusal(tools, "ok.txt")
    assert problem.code is INTERNAL
    assert problem.detail == (
        "The file could not be read because of a server-side file system error."
    )
    assert problem.invalid_params == ()
    assert errno.errorcode[error] in caplog.text
    assert "/secret/host/path" not in caplog.text


@pytest.mark.parametrize("error", [errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS])
def test_a_shortage_is_answered_as_one_and_retryable(
    tools: FileTools, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    # Never a verdict about the path (on main, EMFILE in the walk became "outside").
    def short(resolved: Any, flags: int) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(tools.reader._resolver, "reopen", short)
    problem = refusal(tools, "ok.txt")
    assert problem.code is INTERNAL
    assert problem.metadata == {"retryable": True}
    assert problem.detail.startswith("The server is short of open files or memory right now")
    assert problem.invalid_params == ()


@pytest.mark.parametrize("max_bytes", [1, 5, 6, 9])
def test_a_stateful_encoding_never_offers_an_offset_it_refuses(
    scratch: tuple[FileTools, Path], max_bytes: int
) -> None:
    tools, directory = scratch
    (directory / "jp.txt").write_bytes("\u65e5\u672c\u8a9e".encode("iso2022_jp"))
    answer = call(
        tools.read, {"relative_path": "jp.txt", "encoding": "iso2022_jp", "max_bytes": max_bytes}
    )
    if isinstance(answer, Problem):
        assert answer.invalid_params == ("max_bytes",)
        return
    assert answer["truncated"] is True
    assert answer["next_offset"] == 0
    again = call(
        tools.read,
        {
            "relative_path": "jp.txt",
            "encoding": "iso2022_jp",
            "max_bytes": 64,
            "offset": answer["next_offset"],
        },
    )
    assert isinstance(again, dict)
    assert again["content"] == "\u65e5\u672c\u8a9e"


def test_error_without_errno_is_internal(tools: FileTools, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_reopen(resolved: Any, flags: int) -> int:
        raise OSError("no errno")

    reader = tools.reader
    monkeypatch.setattr(reader._resolver, "reopen", failing_reopen)
    assert refusal(tools, "ok.txt").code is INTERNAL


def test_read_error_is_internal_and_closes_everything(
    tools: FileTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", failing)
    monkeypatch.setattr(os, "preadv", failing)
    before = open_descriptors()
    assert refusal(tools, "ok.txt").code is INTERNAL
    assert open_descriptors() == before


def test_file_type_is_checked_on_the_descriptor(
    tools: FileTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fstat on the O_PATH descriptor is the check that counts, whatever the name said.
    real_fstat = os.fstat

    def fifo_fstat(fd: int) -> os.stat_result:
        fields = list(real_fstat(fd))
        fields[0] = stat.S_IFIFO | 0o644
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fifo_fstat)
    assert refusal(tools, "ok.txt").detail == f"'ok.txt' {SPECIAL}"


def test_a_reopened_descriptor_must_be_the_same_inode(
    tools: FileTools, tree: FSTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reopening gives the very inode the lookup reached, or nothing: here /proc is made to
    # hand back another file, which is refused and closed.
    real_open = os.open
    other = str(tree.root / "sub" / "inner.txt")

    def other_file(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and path.startswith("/proc/self/fd/"):
            return real_open(other, os.O_RDONLY)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", other_file)
    before = open_descriptors()
    problem = refusal(tools, "ok.txt")
    assert (problem.code, problem.detail) == (ACCESS, f"'ok.txt' {CHANGED}")
    assert open_descriptors() == before


@pytest.mark.root
def test_permission_denied_for_real(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "perm"
    root.mkdir()
    (root / "public.txt").write_bytes(b"public\n")
    (root / "private.txt").write_bytes(b"private\n")
    (root / "private.txt").chmod(0o600)
    (root / "locked").mkdir(mode=0o700)
    (root / "locked" / "inner.txt").write_bytes(b"inner\n")
    (root / "traverse_only").mkdir(mode=0o711)
    (root / "traverse_only" / "f.txt").write_bytes(b"traversed\n")
    (root / "traverse_only" / "f.txt").chmod(0o644)
    (root / "no_search").mkdir(mode=0o644)
    os.chmod(root, 0o755)  # noqa: S103 - the unprivileged child must traverse the root
    with file_tools(root, mode) as tools:

        def outcomes() -> dict[str, str]:
            found = {}
            for name in (
                "public.txt",
                "private.txt",
                "locked/inner.txt",
                "traverse_only/f.txt",
                "no_search/..",
                "no_search/x",
            ):
                answer = call(tools.read, {"relative_path": name})
                found[name] = (
                    answer["content"]
                    if isinstance(answer, dict)
                    else f"{answer.code.value}: {answer.detail}"
                )
            return found

        report = as_nobody(outcomes)
    assert report == {
        "public.txt": "public\n",
        "private.txt": f"MCP_ACCESS_DENIED: 'private.txt' {PERMISSION}",
        "locked/inner.txt": f"MCP_ACCESS_DENIED: 'locked/inner.txt' {PERMISSION}",
        # Directories are opened O_PATH: search permission is enough, as for the kernel.
        "traverse_only/f.txt": "traversed\n",
        # The kernel checks search permission before '..' too, and so does the walk.
        "no_search/..": f"MCP_ACCESS_DENIED: 'no_search/..' {PERMISSION}",
        "no_search/x": f"MCP_ACCESS_DENIED: 'no_search/x' {PERMISSION}",
    }


# --- the root ----------------------------------------------------------------------------


def test_root_reached_through_a_symlink_is_canonicalised(tree: FSTree, mode: str) -> None:
    with file_tools(tree.base / "root_via_link", mode) as tools:
        assert read(tools, "ok.txt")["content"] == "hello\n"
        assert read(tools, f"{tree.root}/ok.txt")["content"] == "hello\n"
        problem = refusal(tools, f"{tree.base}/root_via_link/ok.txt")
        assert (problem.code, problem.detail) == (ACCESS, f"The absolute path {OUTSIDE}")


def test_root_renamed_and_replaced_by_an_impostor(tmp_path: Path, mode: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "ok.txt").write_bytes(b"original\n")
    (outside / "secret.txt").write_bytes(OUTSIDE_SECRETS[0])
    with file_tools(root, mode) as tools:
        root.rename(tmp_path / "root_moved")
        impostor = tmp_path / "root"
        impostor.mkdir()
        (impostor / "ok.txt").write_bytes(b"impostor\n")
        # Lookups start from the descriptor opened at start-up: a new directory under the
        # root's name changes nothing.
        assert read(tools, "ok.txt")["content"] == "original\n"
        impostor.rename(tmp_path / "impostor")
        impostor.symlink_to(outside)
        # Nor does a symlink to the outside under that name.
        problem = refusal(tools, "secret.txt")
        assert (problem.code, problem.detail) == (INVALID, "'secret.txt' does not exist")
        assert read(tools, "ok.txt")["content"] == "original\n"


@pytest.mark.parametrize("make", ["missing", "file", "dangling"])
def test_root_that_cannot_be_opened_is_a_config_error(tmp_path: Path, make: str) -> None:
    path = tmp_path / "data"
    if make == "file":
        path.write_bytes(b"")
    elif make == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError) as info:
        build_read_tool(Settings(safe_data_dir=path))
    assert info.value.variable == "MCP_SAFE_DATA_DIR"


def test_unset_root_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_read_tool(Settings())


def test_close_is_idempotent_and_refuses_later_reads(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    before = open_descriptors()
    tool = build_read_tool(Settings(safe_data_dir=tmp_path))
    assert tool.close is not None
    asyncio.run(tool.close())
    asyncio.run(tool.close())
    assert open_descriptors() == before
    with pytest.raises(ToolFailure) as info:
        complete(tool.run(SandboxFSReadParams(relative_path="f")))
    assert info.value.problem.code is INTERNAL
    assert info.value.problem.detail == "The sandbox is closed because the server is shutting down."
    reader = reader_of(tool)
    with pytest.raises(ToolFailure):
        reader.read_now(SandboxFSReadParams(relative_path="f"))


def test_close_waits_for_reads_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The descriptor stays open until the last lookup that borrowed it finishes, so a
    # reused descriptor number can never anchor a lookup.
    (tmp_path / "f").write_bytes(b"x")
    before = open_descriptors()
    tool = build_read_tool(Settings(safe_data_dir=tmp_path))
    reader = reader_of(tool)
    reading, release = threading.Event(), threading.Event()
    real_resolve = reader._resolver.resolve

    def slow_resolve(root_fd: int, relative: str) -> Any:
        reading.set()
        release.wait(10)
        return real_resolve(root_fd, relative)

    monkeypatch.setattr(reader._resolver, "resolve", slow_resolve)
    results: list[str] = []
    worker = threading.Thread(
        target=lambda: results.append(
            reader.read_blocking(SandboxFSReadParams(relative_path="f")).content
        )
    )
    worker.start()
    assert reading.wait(10)
    assert tool.close is not None
    asyncio.run(tool.close())
    assert open_descriptors() != before
    release.set()
    worker.join(10)
    assert results == ["x"]
    assert open_descriptors() == before


# --- the tools as the server sees them -----------------------------------------------------


def test_registry_serves_both_tools_over_one_root(tree: FSTree) -> None:
    before = open_descriptors()
    registry = build_registry(Settings(safe_data_dir=tree.root, metrics_enabled=False))
    try:
        assert list(registry) == ["sandbox_fs_read", "sandbox_fs_list"]
        assert len(open_descriptors()) == len(before) + 1
        read_tool = registry["sandbox_fs_read"]
        inputs = read_tool.description.input_schema
        outputs = read_tool.description.output_schema
        assert not read_tool.is_loaded
        assert call(read_tool.spec(), {"relative_path": "ok.txt"}) == {
            "resolved_path": "ok.txt",
            "content": "hello\n",
            "offset": 0,
            "bytes_read": 6,
            "next_offset": 6,
            "truncated": False,
        }
        assert inputs["required"] == ["encoding", "max_bytes", "offset", "relative_path"]
        assert set(inputs["properties"]) == {"relative_path", "encoding", "max_bytes", "offset"}
        assert all(prop.get("description") for prop in inputs["properties"].values())
        assert inputs["properties"]["max_bytes"]["maximum"] == MAX_MAX_BYTES
        assert inputs["additionalProperties"] is False
        assert set(outputs["properties"]) == set(SandboxFSReadResult.model_fields)
        listing = call(registry["sandbox_fs_list"].spec(), {"relative_path": "sub"})
        assert isinstance(listing, dict)
        assert [entry["name"] for entry in listing["entries"]] == ["deeper", "inner.txt"]
    finally:
        asyncio.run(registry.aclose())
    # Both tools were loaded and closed, each releasing its hold: the root is closed.
    assert open_descriptors() == before


def test_unloaded_tools_release_the_root_they_share(tree: FSTree) -> None:
    before = open_descriptors()
    registry = build_registry(Settings(safe_data_dir=tree.root, metrics_enabled=False))
    assert len(open_descriptors()) == len(before) + 1
    registry.release_unloaded()
    registry.release_unloaded()
    assert open_descriptors() == before


def test_full_path_reads_in_a_worker_thread(tools: FileTools) -> None:
    main_thread = threading.get_ident()
    seen: list[int] = []
    real_pread = os.pread

    def recording_pread(fd: int, size: int, offset: int) -> bytes:
        seen.append(threading.get_ident())
        return real_pread(fd, size, offset)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "pread", recording_pread)
        result = complete(tools.read.run(SandboxFSReadParams(relative_path="link_in")))
    assert result.content == "hello\n"
    assert seen
    assert main_thread not in seen


def test_result_text_is_the_structured_json(tools: FileTools) -> None:
    output = asyncio.run(_full_output(tools.read, {"relative_path": "ok.txt"}))
    assert json.loads(output.text) == output.structured


@given(text=st.text(max_size=40), slice_chars=st.integers(1, 8))
def test_the_wire_cost_counted_in_slices_is_the_cost_of_the_whole(
    text: str, slice_chars: int
) -> None:
    ascii_json, text_json = (
        json.JSONEncoder(ensure_ascii=True),
        json.JSONEncoder(ensure_ascii=False),
    )
    whole = len(ascii_json.encode(text)) + len(ascii_json.encode(text_json.encode(text)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(read_module, "_COST_SLICE_CHARS", slice_chars)
        assert read_module.wire_cost(text) == whole


@pytest.mark.root
def test_no_oracle_for_an_unprivileged_server(tmp_path: Path, mode: str) -> None:
    # On main, as an unprivileged uid, /proc/1/cwd/x said "permission denied" where
    # /proc/999999/cwd/x said "outside": what exists outside showed through. Every route out
    # now gets one answer, from the first step that would leave the root.
    (tmp_path / "ok.txt").write_bytes(b"hello\n")
    (tmp_path / "p1").symlink_to("/proc/1/cwd")
    (tmp_path / "p9").symlink_to("/proc/999999/cwd")
    (tmp_path / "up1").symlink_to("../../../../../../../proc/1/cwd")
    os.chmod(tmp_path, 0o755)  # noqa: S103 - the unprivileged child must traverse the root
    with file_tools(tmp_path, mode) as tools:

        def details() -> list[str]:
            found = []
            for path in ("/proc/1/cwd/x", "/proc/999999/cwd/x", "p1/x", "p9/x", "up1/x"):
                answer = call(tools.read, {"relative_path": path})
                assert isinstance(answer, Problem)
                found.append(f"{answer.code.value}: {answer.detail}")
            return found

        seen = as_nobody(details)
    assert seen == [
        f"MCP_ACCESS_DENIED: The absolute path {OUTSIDE}",
        f"MCP_ACCESS_DENIED: The absolute path {OUTSIDE}",
        f"MCP_ACCESS_DENIED: 'p1/x' {OUTSIDE}",
        f"MCP_ACCESS_DENIED: 'p9/x' {OUTSIDE}",
        f"MCP_ACCESS_DENIED: 'up1/x' {OUTSIDE}",
    ]
