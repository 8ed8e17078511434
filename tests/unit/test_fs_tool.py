"""`sandbox_fs_read`: the contract, the five enforcement steps and the path attack vectors.

The cases run against the attack corpus's fixture tree (`tests/support/fs_tree.py`). This
module is also what the hand-run mutation checks execute: dropping `O_NOFOLLOW` from the
directory walk, or replacing the component-wise containment with a string prefix check,
must each make it fail (the swap tests and the prefix-sibling cases catch them).
"""

from __future__ import annotations

import asyncio
import codecs
import ctypes
import errno
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import ValidationError

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.core.registry import ToolOutput, ToolSpec
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import (
    DEFAULT_MAX_BYTES,
    MAX_MAX_BYTES,
    MAX_PATH_CHARS,
    SandboxFSReadParams,
    SandboxFSReadResult,
    canonical_text_codec,
)
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools import build_registry
from mcp_server_suite.tools.fs import read as fs_module
from mcp_server_suite.tools.fs.read import MAX_ECHO_CHARS, MAX_SYMLINKS, SandboxRoot, build_fs_tool
from mcp_server_suite.tools.fs.root import open_root
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
LINK_MET = "meets a symbolic link loop, or one of its components changed while it was being read"
SPECIAL = "is not a regular file (it is a FIFO, socket or device) and is not read"
MISSING = "does not exist"
NOT_A_DIRECTORY = "has a component that is not a directory"
DIRECTORY = "names a directory, not a file"
NOT_A_FILE_NAME = "does not name a file: it ends in '/', '.' or '..'"
TOO_LONG = "has a name longer than the file system allows"
PERMISSION = "cannot be read: permission denied"


# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    # CI runs as root, so the device and the socket are always made: nothing may skip.
    return ensure_complete(build_fs_tree(tmp_path_factory.mktemp("fs") / "base"))


@pytest.fixture(scope="module")
def sandbox(tree: FSTree) -> Iterator[SandboxRoot]:
    root = SandboxRoot(open_root(tree.root))
    yield root
    root.close()


@pytest.fixture(scope="module")
def spec(tree: FSTree) -> Iterator[ToolSpec[SandboxFSReadParams, SandboxFSReadResult]]:
    tool = build_fs_tool(Settings(safe_data_dir=tree.root))
    yield tool
    assert tool.close is not None
    run(tool.close())


T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def wait() -> T:
        return await awaitable

    return asyncio.run(wait())


def read(sandbox: SandboxRoot, path: str, **arguments: Any) -> SandboxFSReadResult:
    return sandbox.read_blocking(SandboxFSReadParams(relative_path=path, **arguments))


def refusal(sandbox: SandboxRoot, path: str, **arguments: Any) -> Problem:
    with pytest.raises(ToolFailure) as info:
        read(sandbox, path, **arguments)
    return info.value.problem


def invoke(spec: ToolSpec[Any, Any], arguments: dict[str, Any]) -> ToolOutput:
    async def call() -> ToolOutput:
        return await Guardrails(limiter=ConcurrencyLimiter()).invoke(spec, arguments)

    return asyncio.run(call())


def assert_no_host_path(problem: Problem, tree: FSTree) -> None:
    text = problem.as_text()
    for host_path in (tree.base, tree.root, tree.outside):
        assert str(host_path) not in text


# The tool reaches the file system only through the `os` module, so the tests inject
# faults and swaps by patching `os` functions (monkeypatch restores them). Each fake acts
# only on the names the test is about, because pytest itself uses the same functions.


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# --- the attack corpus -----------------------------------------------------------------

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
def test_corpus_vector_through_the_guardrails(
    vector: dict[str, Any], tree: FSTree, spec: ToolSpec[Any, Any]
) -> None:
    expect = SPEC_OVERRIDES.get(vector["id"], vector["expect"])
    payload = tree.expand(vector["payload"])
    if expect == "run":
        output = invoke(spec, {"relative_path": payload})
        target = Path(os.path.realpath(os.path.join(tree.root, payload)))
        expected = target.read_bytes()[:DEFAULT_MAX_BYTES]
        assert output.structured["content"] == expected.decode("utf-8")
        assert output.structured["bytes_read"] == len(expected)
        assert output.structured["resolved_path"] == str(target.relative_to(tree.root))
        assert not any(secret.decode() in output.text for secret in OUTSIDE_SECRETS)
    else:
        with pytest.raises(ToolFailure) as info:
            invoke(spec, {"relative_path": payload})
        assert info.value.problem.code is REJECT_CODES[vector["id"]]
        assert_no_host_path(info.value.problem, tree)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_corpus_vector_without_the_sanitizer(
    vector: dict[str, Any], tree: FSTree, sandbox: SandboxRoot
) -> None:
    # The argument model and the tool hold on their own, without the sanitizer in front.
    expect = SPEC_OVERRIDES.get(vector["id"], vector["expect"])
    payload = tree.expand(vector["payload"])
    if expect == "run":
        assert read(sandbox, payload).content
    elif "\x00" in payload:
        with pytest.raises(ValidationError):
            SandboxFSReadParams(relative_path=payload)
    else:
        assert refusal(sandbox, payload).code is REJECT_CODES[vector["id"]]


@pytest.mark.parametrize("max_bytes", [DEFAULT_MAX_BYTES, MAX_MAX_BYTES])
def test_big_file_is_truncated_at_the_cap(sandbox: SandboxRoot, max_bytes: int) -> None:
    # PATH-088: the corpus observed 1,048,576 characters and truncated=True at the 1 MiB cap.
    result = read(sandbox, "big.txt", max_bytes=max_bytes)
    assert result.content == "a" * max_bytes
    assert (result.bytes_read, result.truncated) == (max_bytes, True)
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
    ("sub/deeper/../../ok.txt", "ok.txt", "hello\n"),
    # Leaves the sandbox through a symlink and comes back: the canonical path is inside.
    ("link_dir_out/../root/ok.txt", "ok.txt", "hello\n"),
    # realpath normalises '..' lexically once a loop stops it, and after a file; both land
    # inside, where the canonical path is what is opened.
    ("loop_a/../ok.txt", "ok.txt", "hello\n"),
    ("ok.txt/../ok.txt", "ok.txt", "hello\n"),
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
def test_reads(sandbox: SandboxRoot, tree: FSTree, path: str, resolved: str, content: str) -> None:
    result = read(sandbox, tree.expand(path))
    assert result == SandboxFSReadResult(
        resolved_path=resolved,
        content=content,
        bytes_read=len(content.encode()),
        truncated=False,
    )


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
    ("../root/../outside/secret.txt", ACCESS, OUTSIDE),
    ("link_out", ACCESS, OUTSIDE),
    ("link_out_rel", ACCESS, OUTSIDE),
    ("link_dir_out/secret.txt", ACCESS, OUTSIDE),
    ("link_dir_out/does_not_exist", ACCESS, OUTSIDE),
    ("link_dir_out", ACCESS, OUTSIDE),
    ("link_evil/secret.txt", ACCESS, OUTSIDE),
    ("dangling_out", ACCESS, OUTSIDE),
    ("zero", ACCESS, OUTSIDE),
    ("proc_root/etc/passwd", ACCESS, OUTSIDE),
    ("loop_a/../../outside/secret.txt", ACCESS, OUTSIDE),
    ("{BASE}/outside/secret.txt", ACCESS, OUTSIDE),
    ("{BASE}/root_evil/secret.txt", ACCESS, OUTSIDE),
    ("{ROOT}_evil/secret.txt", ACCESS, OUTSIDE),
    ("{ROOT}/../outside/secret.txt", ACCESS, OUTSIDE),
    ("{BASE}/root_via_link/ok.txt", ACCESS, OUTSIDE),
    ("/proc/self/cwd/ok.txt", ACCESS, OUTSIDE),
    ("/etc/passwd", ACCESS, OUTSIDE),
    ("/", ACCESS, OUTSIDE),
    ("fifo", ACCESS, SPECIAL),
    ("sock", ACCESS, SPECIAL),
    ("null_dev", ACCESS, SPECIAL),
    ("loop_a", ACCESS, LINK_MET),
    ("loop_b", ACCESS, LINK_MET),
    ("self_loop", ACCESS, LINK_MET),
    ("loop_a/x", ACCESS, LINK_MET),
    ("self_loop/x/y", ACCESS, LINK_MET),
    ("missing.txt", INVALID, MISSING),
    ("sub/missing.txt", INVALID, MISSING),
    ("missing_dir/x.txt", INVALID, MISSING),
    ("dangling", INVALID, MISSING),
    ("case.txt", INVALID, MISSING),
    ("ok.txt/x", INVALID, NOT_A_DIRECTORY),
    ("sub", INVALID, DIRECTORY),
    ("dir_only", INVALID, DIRECTORY),
    ("link_in_dir", INVALID, DIRECTORY),
    ("%2e%2e", INVALID, DIRECTORY),
    ("{ROOT}", INVALID, DIRECTORY),
    ("{ROOT}/sub", INVALID, DIRECTORY),
    (".", INVALID, NOT_A_FILE_NAME),
    ("sub/", INVALID, NOT_A_FILE_NAME),
    ("sub/..", INVALID, NOT_A_FILE_NAME),
    ("ok.txt/", INVALID, NOT_A_FILE_NAME),
    ("ok.txt/.", INVALID, NOT_A_FILE_NAME),
    ("ok.txt/..", INVALID, NOT_A_FILE_NAME),
    ("link_in/", INVALID, NOT_A_FILE_NAME),
    ("{ROOT}/", INVALID, NOT_A_FILE_NAME),
    ("{ROOT}/ok.txt/.", INVALID, NOT_A_FILE_NAME),
    ("a" * 256, INVALID, TOO_LONG),
    ("sub/" + "a" * 256 + "/x.txt", INVALID, TOO_LONG),
]


@pytest.mark.parametrize(("path", "code", "phrase"), REFUSALS)
def test_refusals(
    sandbox: SandboxRoot, tree: FSTree, path: str, code: MCPErrorCode, phrase: str
) -> None:
    payload = tree.expand(path)
    problem = refusal(sandbox, payload)
    subject = "The absolute path" if payload.startswith("/") else quote(payload, MAX_ECHO_CHARS)
    assert problem.code is code
    assert problem.detail == f"{subject} {phrase}"
    assert problem.invalid_params == ("relative_path",)
    assert_no_host_path(problem, tree)


def test_problem_matches_the_design_document(spec: ToolSpec[Any, Any]) -> None:
    # The in-band error shown in the design document's "Error model", byte for byte.
    with pytest.raises(ToolFailure) as info:
        invoke(spec, {"relative_path": "../../etc/passwd"})
    assert info.value.problem.as_text() == (
        '{"type": "urn:mcp-server-suite:problem:access-denied", "title": "Access to the '
        'requested resource is denied", "status": 403, "detail": "\'../../etc/passwd\' '
        'resolves outside the sandbox", "code": "MCP_ACCESS_DENIED", "invalid_params": '
        '["relative_path"], "metadata": {}}'
    )


def test_long_path_echo_is_cut_at_256_characters(sandbox: SandboxRoot) -> None:
    path = "../" + "x" * 400
    problem = refusal(sandbox, path)
    assert problem.detail == f"{path[:256]!r} (cut at 256 characters) {OUTSIDE}"


def test_echo_escapes_what_the_sanitizer_would_refuse(sandbox: SandboxRoot) -> None:
    # Without the sanitizer in front, an escape or bidi override still cannot reach a
    # client's display unescaped.
    problem = refusal(sandbox, "../\u202e\x1b[31m")
    assert "\u202e" not in problem.detail
    assert "\x1b" not in problem.detail
    assert problem.detail.startswith("'../\\u202e\\x1b[31m'")


def test_undecodable_content_names_the_encoding(sandbox: SandboxRoot) -> None:
    problem = refusal(sandbox, "binary.bin")
    assert problem.code is INVALID
    assert problem.invalid_params == ("encoding",)
    assert problem.detail == "'binary.bin' holds bytes that are not valid utf-8 text"


def test_binary_reads_as_latin_1(sandbox: SandboxRoot) -> None:
    result = read(sandbox, "binary.bin", encoding="latin-1")
    assert result.content == b"\xff\xfe\x00\x01binary\x80".decode("latin-1")
    assert result.bytes_read == 11


def test_no_descriptor_leaks(sandbox: SandboxRoot, tree: FSTree) -> None:
    before = open_descriptors()
    for path, *_ in RUNS + REFUSALS:
        with suppress(ToolFailure):
            read(sandbox, tree.expand(path))
    read(sandbox, "big.txt", max_bytes=MAX_MAX_BYTES)
    assert open_descriptors() == before


# --- arguments ---------------------------------------------------------------------------

TEXT_CODECS = [
    "utf-8",
    "UTF-8",
    "utf8",
    "utf_8",
    "U8",
    "utf-16",
    "utf-16-le",
    "utf-32",
    "utf-8-sig",
    "utf-7",
    "latin-1",
    "ISO-8859-1",
    "iso8859_15",
    "ascii",
    "us-ascii",
    "ansi_x3.4_1968",
    "cp1252",
    "windows-1252",
    "shift_jis",
    "euc_jp",
    "iso2022_jp",
    "gb18030",
    "big5",
    "koi8_r",
    "mac_roman",
    "cp037",
]


@pytest.mark.parametrize("name", TEXT_CODECS)
def test_text_codecs_are_accepted_by_canonical_name(name: str) -> None:
    params = SandboxFSReadParams(relative_path="ok.txt", encoding=name)
    assert params.encoding == codecs.lookup(name).name


NOT_TEXT_CODECS = [
    # bytes-to-bytes and str-to-str codecs, by every spelling the issue lists
    "base64",
    "base64_codec",
    "base_64",
    "zlib",
    "zip",
    "zlib_codec",
    "bz2",
    "hex",
    "hex_codec",
    "uu",
    "quopri",
    "quotedprintable",
    "rot13",
    "rot_13",
    "ROT-13",
    # text codecs that do not decode file content
    "idna",
    "punycode",
    "unicode_escape",
    "unicode-escape",
    "raw_unicode_escape",
    "undefined",
    # not codecs on this platform, or not codec names at all
    "mbcs",
    "no-such-codec",
    "utf-9",
    "",
    "utf--8",
    "utf 8",
    " utf-8",
    "utf-8\n",
    "../utf-8",
    "encodings.utf_8",
    "utf8" + "x" * 61,
]


@pytest.mark.parametrize("name", NOT_TEXT_CODECS)
def test_other_codecs_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        SandboxFSReadParams(relative_path="ok.txt", encoding=name)
    assert [error["loc"] for error in info.value.errors()] == [("encoding",)]


def test_codec_refusal_quotes_the_name() -> None:
    with pytest.raises(ValueError, match=r"^'base64' is not a Python text codec$"):
        canonical_text_codec("base64")
    with pytest.raises(ValueError, match="does not decode file content"):
        canonical_text_codec("punycode")


def test_codec_refusal_through_the_guardrails(spec: ToolSpec[Any, Any]) -> None:
    with pytest.raises(ToolFailure) as info:
        invoke(spec, {"relative_path": "ok.txt", "encoding": "rot13"})
    assert info.value.problem.code is INVALID
    assert info.value.problem.invalid_params == ("encoding",)


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
    pytest.param({"relative_path": "ok.txt", "max_bytes": 5.0}, "max_bytes", id="float-int"),
    pytest.param({"relative_path": "ok.txt", "max_bytes": True}, "max_bytes", id="bool-int"),
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
    assert (params.encoding, params.max_bytes) == ("utf-8", DEFAULT_MAX_BYTES)
    with pytest.raises(ValidationError):
        SandboxFSReadParams.model_validate_json('{"relative_path": "ok.txt", "max_bytes": "9"}')


def test_models_are_frozen() -> None:
    params = SandboxFSReadParams(relative_path="ok.txt")
    with pytest.raises(ValidationError):
        params.relative_path = "../x"  # type: ignore[misc]  # The point: assignment is refused.


# --- decoding and byte counting ----------------------------------------------------------

EURO = "\u20ac".encode()  # three bytes in UTF-8
DECODES = [
    # (file bytes, encoding, max_bytes, (content, bytes_read, truncated))
    pytest.param(b"abc", "utf-8", 3, ("abc", 3, False), id="exactly-max"),
    pytest.param(b"abcd", "utf-8", 3, ("abc", 3, True), id="one-over"),
    pytest.param(b"caf\xc3\xa9", "utf-8", 4, ("caf", 3, True), id="two-byte-cut"),
    pytest.param(b"caf\xc3\xa9", "utf-8", 5, ("caf\u00e9", 5, False), id="two-byte-whole"),
    pytest.param(b"ok" + EURO, "utf-8", 3, ("ok", 2, True), id="three-byte-cut-1"),
    pytest.param(b"ok" + EURO, "utf-8", 4, ("ok", 2, True), id="three-byte-cut-2"),
    pytest.param(EURO + b"!", "utf-8", 3, ("\u20ac", 3, True), id="three-byte-at-cap"),
    pytest.param(b"\xf0\x9f\x98\x80", "utf-8", 3, ("", 0, True), id="four-byte-cut"),
    pytest.param(b"ok\xffmore", "utf-8", 2, ("ok", 2, True), id="bad-byte-beyond-cap"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 6, ("hi", 6, False), id="utf16-bom"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 5, ("h", 4, True), id="utf16-half-unit"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 2, ("", 2, True), id="utf16-bom-only"),
    pytest.param(b"\xff\xfeh\x00i\x00", "utf-16", 1, ("", 0, True), id="utf16-half-bom"),
    pytest.param(
        "\U0001f600".encode("utf-16-le") + b"!\x00", "utf-16-le", 3, ("", 0, True), id="utf16-pair"
    ),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 5, ("ok", 5, False), id="sig-whole"),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 2, ("", 0, True), id="sig-half-bom"),
    pytest.param(b"\xef\xbb\xbfok", "utf-8-sig", 4, ("o", 4, True), id="sig-one-char"),
    pytest.param(
        "\u65e5\u672c".encode("shift_jis"), "shift_jis", 3, ("\u65e5", 2, True), id="sjis"
    ),
    # Stateful codecs: an escape sequence is consumed (counted) even when no character
    # follows it, and a shift sequence cut by the cap is held back whole.
    pytest.param(b"\x1b$BF|K\\\x1b(B", "iso2022_jp", 6, ("\u65e5", 5, True), id="iso2022-cut"),
    pytest.param(b"\x1b$BF|K\\\x1b(B", "iso2022_jp", 3, ("", 3, True), id="iso2022-escape"),
    pytest.param(b"a+IKw-b", "utf-7", 5, ("a", 1, True), id="utf7-shift-cut"),
    pytest.param(b"a+IKw-b", "utf-7", 6, ("a\u20ac", 6, True), id="utf7-shift-whole"),
    pytest.param(b"\xff\xfe\x00", "latin-1", 2, ("\xff\xfe", 2, True), id="latin-1"),
    pytest.param(b"", "utf-16", 1, ("", 0, False), id="empty"),
]


@pytest.mark.parametrize(("data", "encoding", "max_bytes", "expected"), DECODES)
def test_decoding(
    tmp_path: Path, data: bytes, encoding: str, max_bytes: int, expected: tuple[str, int, bool]
) -> None:
    (tmp_path / "f").write_bytes(data)
    root = SandboxRoot(open_root(tmp_path))
    try:
        result = read(root, "f", encoding=encoding, max_bytes=max_bytes)
    finally:
        root.close()
    assert (result.content, result.bytes_read, result.truncated) == expected


UNDECODABLE = [
    # (file bytes, encoding, max_bytes)
    pytest.param(b"ok\xff", "utf-8", 100, id="bad-byte"),
    pytest.param(b"ok\xe2\x82", "utf-8", 100, id="cut-at-end-of-file"),
    pytest.param(b"ok\xe2\x82", "utf-8", 4, id="cut-at-end-of-file-and-cap"),
    pytest.param(b"\xed\xa0\x80", "utf-8", 100, id="encoded-surrogate"),
    pytest.param(b"\xc0\xaf", "utf-8", 100, id="overlong-slash"),
    pytest.param(b"a", "utf-16", 100, id="odd-length"),
    pytest.param(b"\x00\xd8\x00\x00", "utf-16-le", 100, id="utf16-lone-surrogate"),
    pytest.param(b"+2AA-", "utf-7", 100, id="utf7-lone-surrogate"),
    pytest.param(b"+2AA-rest", "utf-7", 5, id="utf7-lone-surrogate-truncated"),
    pytest.param(b"\x80", "ascii", 100, id="ascii-high-bit"),
]


@pytest.mark.parametrize(("data", "encoding", "max_bytes"), UNDECODABLE)
def test_undecodable(tmp_path: Path, data: bytes, encoding: str, max_bytes: int) -> None:
    (tmp_path / "f").write_bytes(data)
    root = SandboxRoot(open_root(tmp_path))
    try:
        problem = refusal(root, "f", encoding=encoding, max_bytes=max_bytes)
    finally:
        root.close()
    assert problem.code is INVALID
    assert problem.invalid_params == ("encoding",)
    assert problem.detail == f"'f' holds bytes that are not valid {encoding} text"


# --- OS errors: every errno in the table, injected at the open -----------------------------

ERRNO_CASES = [
    (errno.ENOENT, INVALID, MISSING),
    (errno.ENOTDIR, INVALID, NOT_A_DIRECTORY),
    (errno.EISDIR, INVALID, DIRECTORY),
    (errno.ENAMETOOLONG, INVALID, TOO_LONG),
    (errno.ELOOP, ACCESS, LINK_MET),
    (errno.EACCES, ACCESS, PERMISSION),
    # EPERM comes from an LSM or a fanotify policy; it cannot be produced here for real.
    (errno.EPERM, ACCESS, PERMISSION),
    (errno.ENXIO, ACCESS, SPECIAL),
    (errno.ENODEV, ACCESS, SPECIAL),
]


def fail_open_of(
    monkeypatch: pytest.MonkeyPatch, name: str, error: int, *, leaf_only: bool = False
) -> None:
    real_open = os.open

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        is_leaf = not flags & os.O_DIRECTORY
        if path == name and (is_leaf or not leaf_only):
            raise OSError(error, f"{os.strerror(error)}: /secret/host/path")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)


@pytest.mark.parametrize(("error", "code", "phrase"), ERRNO_CASES)
def test_errno_mapping_at_the_leaf(
    sandbox: SandboxRoot,
    monkeypatch: pytest.MonkeyPatch,
    error: int,
    code: MCPErrorCode,
    phrase: str,
) -> None:
    fail_open_of(monkeypatch, "ok.txt", error)
    problem = refusal(sandbox, "ok.txt")
    assert (problem.code, problem.detail) == (code, f"'ok.txt' {phrase}")
    assert problem.invalid_params == ("relative_path",)


@pytest.mark.parametrize("error", [errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM])
def test_other_errors_are_internal_and_generic(
    sandbox: SandboxRoot,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: int,
) -> None:
    fail_open_of(monkeypatch, "ok.txt", error)
    with caplog.at_level(logging.WARNING, logger="mcp_server_suite.tools.fs.read"):
        problem = refusal(sandbox, "ok.txt")
    assert problem.code is INTERNAL
    assert (
        problem.detail == "The file could not be read because of a server-side file system error."
    )
    assert problem.invalid_params == ()
    assert errno.errorcode[error] in caplog.text
    assert "/secret/host/path" not in caplog.text


def test_read_error_is_internal(sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_read(fd: int, size: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "read", failing_read)
    before = open_descriptors()
    assert refusal(sandbox, "ok.txt").code is INTERNAL
    assert open_descriptors() == before


def test_error_without_errno_is_internal(
    sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fstat = os.fstat
    calls: list[int] = []

    def failing_fstat(fd: int) -> os.stat_result:
        # Only the tool's own call fails: os.fstat is global, and pytest uses it too.
        calls.append(fd)
        if len(calls) == 1:
            raise OSError("no errno")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", failing_fstat)
    assert refusal(sandbox, "ok.txt").code is INTERNAL


def test_directory_errors_map_like_leaf_errors(
    sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_open_of(monkeypatch, "sub", errno.EACCES)
    problem = refusal(sandbox, "sub/inner.txt")
    assert (problem.code, problem.detail) == (ACCESS, f"'sub/inner.txt' {PERMISSION}")


def test_not_a_directory_is_told_apart_from_a_symlink(
    sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel answers ENOTDIR for both; the walk looks again to tell the caller which.
    assert refusal(sandbox, "ok.txt/x").detail == f"'ok.txt/x' {NOT_A_DIRECTORY}"
    assert refusal(sandbox, "loop_b/x").detail == f"'loop_b/x' {LINK_MET}"
    # If the second look fails too (the entry vanished), the first answer stands.
    real_stat = os.stat

    def vanishing_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "ok.txt" and kwargs.get("dir_fd") is not None:
            raise FileNotFoundError(errno.ENOENT, "gone")
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", vanishing_stat)
    assert refusal(sandbox, "ok.txt/x").detail == f"'ok.txt/x' {NOT_A_DIRECTORY}"


def test_not_a_directory_then_a_directory_means_the_tree_changed(
    sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ENOTDIR for a name that is a directory again when looked at: swapped and back.
    fail_open_of(monkeypatch, "sub", errno.ENOTDIR)
    assert refusal(sandbox, "sub/inner.txt").detail == f"'sub/inner.txt' {LINK_MET}"


def test_permission_denied_for_real(tree: FSTree, tmp_path: Path) -> None:
    # Root bypasses file modes, so a forked child drops to nobody (65534) first; after
    # setuid to a non-zero uid the kernel clears every capability, and the modes hold.
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
    os.chmod(root, 0o755)  # noqa: S103 - the unprivileged child must traverse the root
    sandbox = SandboxRoot(open_root(root))
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, whose coverage is not collected
        status = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            outcomes = {}
            for name in ("public.txt", "private.txt", "locked/inner.txt", "traverse_only/f.txt"):
                try:
                    outcomes[name] = read(sandbox, name).content
                except ToolFailure as exc:
                    outcomes[name] = f"{exc.problem.code.value}: {exc.problem.detail}"
            os.write(writer, json.dumps(outcomes).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    sandbox.close()
    assert os.waitstatus_to_exitcode(status) == 0
    assert json.loads(report) == {
        "public.txt": "public\n",
        "private.txt": f"MCP_ACCESS_DENIED: 'private.txt' {PERMISSION}",
        "locked/inner.txt": f"MCP_ACCESS_DENIED: 'locked/inner.txt' {PERMISSION}",
        # Directories are opened O_PATH: search permission is enough, as for the kernel.
        "traverse_only/f.txt": "traversed\n",
    }


# --- the walk: symlinks swapped in after resolution ------------------------------------------


def swap_tree(base: Path) -> tuple[Path, Path]:
    """A root with `swap/secret.txt` inside and the same name, with a secret, outside."""
    root, outside = base / "root", base / "outside"
    (root / "swap").mkdir(parents=True)
    (root / "swap" / "secret.txt").write_bytes(b"inside\n")
    outside.mkdir()
    (outside / "secret.txt").write_bytes(OUTSIDE_SECRETS[0])
    (root / "swap_link").symlink_to(outside)
    return root, outside


def replace_with_symlink(path: Path, target: Path) -> None:
    aside = path.with_name(path.name + ".aside")
    path.rename(aside)
    path.symlink_to(target)


def after_resolution(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    # The tool resolves once per read; the action runs after that resolution only.
    real_realpath = fs_module._realpath
    pending = [action]

    def realpath_then_act(base: str, relative: str) -> str:
        resolved = real_realpath(base, relative)
        while pending:
            pending.pop()()
        return resolved

    monkeypatch.setattr(fs_module, "_realpath", realpath_then_act)


def test_directory_swapped_for_symlink_after_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = swap_tree(tmp_path)
    sandbox = SandboxRoot(open_root(root))
    after_resolution(monkeypatch, lambda: replace_with_symlink(root / "swap", outside))
    problem = refusal(sandbox, "swap/secret.txt")
    sandbox.close()
    assert (problem.code, problem.detail) == (ACCESS, f"'swap/secret.txt' {LINK_MET}")


def test_leaf_swapped_for_symlink_after_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = swap_tree(tmp_path)
    sandbox = SandboxRoot(open_root(root))
    leaf = root / "swap" / "secret.txt"
    after_resolution(monkeypatch, lambda: replace_with_symlink(leaf, outside / "secret.txt"))
    problem = refusal(sandbox, "swap/secret.txt")
    sandbox.close()
    assert (problem.code, problem.detail) == (ACCESS, f"'swap/secret.txt' {LINK_MET}")


def swap_after_type_check(
    monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]
) -> None:
    real_stat = os.stat

    def stat_then_act(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)
        if path == name and kwargs.get("dir_fd") is not None:
            action()
        return result

    monkeypatch.setattr(os, "stat", stat_then_act)


def test_leaf_swapped_for_symlink_after_the_type_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The open itself refuses the symlink: O_NOFOLLOW on the leaf.
    root, outside = swap_tree(tmp_path)
    sandbox = SandboxRoot(open_root(root))
    leaf = root / "swap" / "secret.txt"
    swap_after_type_check(
        monkeypatch, "secret.txt", lambda: replace_with_symlink(leaf, outside / "secret.txt")
    )
    problem = refusal(sandbox, "swap/secret.txt")
    sandbox.close()
    assert (problem.code, problem.detail) == (ACCESS, f"'swap/secret.txt' {LINK_MET}")


def test_leaf_swapped_for_fifo_after_the_type_check_never_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # O_NONBLOCK lets the open return at once and fstat on the descriptor refuses it.
    (tmp_path / "f.txt").write_bytes(b"plain\n")
    sandbox = SandboxRoot(open_root(tmp_path))

    def to_fifo() -> None:
        (tmp_path / "f.txt").unlink()
        os.mkfifo(tmp_path / "f.txt")

    swap_after_type_check(monkeypatch, "f.txt", to_fifo)
    outcome: list[Problem] = []

    def attempt() -> None:
        with pytest.raises(ToolFailure) as info:
            read(sandbox, "f.txt")
        outcome.append(info.value.problem)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "opening a FIFO blocked the worker"
    sandbox.close()
    assert [(p.code, p.detail) for p in outcome] == [(ACCESS, f"'f.txt' {SPECIAL}")]


def test_leaf_swapped_for_directory_after_the_type_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f.txt").write_bytes(b"plain\n")
    sandbox = SandboxRoot(open_root(tmp_path))

    def to_directory() -> None:
        (tmp_path / "f.txt").unlink()
        (tmp_path / "f.txt").mkdir()

    swap_after_type_check(monkeypatch, "f.txt", to_directory)
    problem = refusal(sandbox, "f.txt")
    sandbox.close()
    assert (problem.code, problem.detail) == (INVALID, f"'f.txt' {DIRECTORY}")


@pytest.mark.parametrize(
    ("error", "code", "phrase"),
    [
        # readlink after lstat: the symlink was removed, or replaced by a non-link.
        (errno.ENOENT, INVALID, MISSING),
        (errno.EINVAL, ACCESS, LINK_MET),
        (errno.EACCES, ACCESS, PERMISSION),
    ],
)
def test_resolution_failures_fail_closed(
    sandbox: SandboxRoot,
    monkeypatch: pytest.MonkeyPatch,
    error: int,
    code: MCPErrorCode,
    phrase: str,
) -> None:
    def failing_realpath(base: str, relative: str) -> str:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(fs_module, "_realpath", failing_realpath)
    problem = refusal(sandbox, "link_in")
    assert (problem.code, problem.detail) == (code, f"'link_in' {phrase}")


def test_unnormalised_resolution_is_refused(
    sandbox: SandboxRoot, tree: FSTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk must never open '..': a resolver that left one in is refused, not trusted.
    monkeypatch.setattr(
        fs_module, "_realpath", lambda base, relative: f"{tree.root}/sub/../../outside"
    )
    problem = refusal(sandbox, "sub/x")
    assert (problem.code, problem.detail) == (
        ACCESS,
        "'sub/x' cannot be resolved to a canonical path",
    )


@pytest.mark.parametrize("depth", [MAX_SYMLINKS + 1, sys.getrecursionlimit() + 100])
def test_symlink_chain_longer_than_the_kernel_follows_is_refused(
    tmp_path: Path, depth: int
) -> None:
    for index in range(depth):
        (tmp_path / f"c{index}").symlink_to(f"c{index + 1}")
    (tmp_path / f"c{depth}").write_bytes(b"end\n")
    sandbox = SandboxRoot(open_root(tmp_path))
    problem = refusal(sandbox, "c0")
    sandbox.close()
    assert (problem.code, problem.detail) == (ACCESS, f"'c0' {LINK_MET}")


def test_symlink_chain_the_kernel_follows_is_read(tmp_path: Path) -> None:
    for index in range(MAX_SYMLINKS):
        (tmp_path / f"c{index}").symlink_to(f"c{index + 1}")
    (tmp_path / f"c{MAX_SYMLINKS}").write_bytes(b"end\n")
    sandbox = SandboxRoot(open_root(tmp_path))
    try:
        result = sandbox.read_blocking(SandboxFSReadParams(relative_path="c0"))
    finally:
        sandbox.close()
    assert (result.resolved_path, result.content) == (f"c{MAX_SYMLINKS}", "end\n")


def test_realpath_agrees_with_the_standard_library(tree: FSTree) -> None:
    _realpath = fs_module._realpath
    for relative in (
        "ok.txt",
        "link_in",
        "link_in_dir/inner.txt",
        "link_out",
        "missing/../ok.txt",
        "sub/deeper/../../link_dir_out/secret.txt",
        "dangling",
        "ok.txt/x/..",
        ".",
        "",
    ):
        path = os.path.join(str(tree.root), relative)
        assert _realpath(str(tree.root), relative) == os.path.realpath(path), relative
    assert _realpath("/", "..") == "/"


# The race: a directory inside the root trades places with a symlink to the outside, as
# fast as the swapper can, while the tool reads through it. 20,000 reads take about a
# second and hit the window between resolution and the walk many times.
RACE_READS = 20_000

# renameat2(2): exchange two names atomically, so the directory is never missing.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

SWAPPER_PROCESS = """
import ctypes, os, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("ready", flush=True)
while True:
    if renameat2(-100, a, -100, b, 2):
        raise OSError(ctypes.get_errno(), "renameat2")
"""


def exchange(a: Path, b: Path) -> None:
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        raise OSError(ctypes.get_errno(), "renameat2")


@contextmanager
def swapping_thread(a: Path, b: Path) -> Iterator[None]:
    # The brief's shape: a thread in the same process. Threads switch as often as the
    # interpreter allows, so the swapper also runs between the steps of a read.
    stop = threading.Event()
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    names = os.fsencode(a), os.fsencode(b)

    def swapper() -> None:
        while not stop.is_set():
            if renameat2(_AT_FDCWD, names[0], _AT_FDCWD, names[1], _RENAME_EXCHANGE):
                raise OSError(ctypes.get_errno(), "renameat2")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)


@contextmanager
def swapping_process(a: Path, b: Path) -> Iterator[None]:
    # A second core swapping with no interpreter lock to share: the harder race.
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER_PROCESS, str(a), str(b)], stdout=subprocess.PIPE
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == b"ready\n"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        assert swapper.stdout is not None
        swapper.stdout.close()


@pytest.mark.parametrize("swapping", [swapping_thread, swapping_process])
def test_swap_race_never_returns_outside_content(
    tmp_path: Path, swapping: Callable[[Path, Path], AbstractContextManager[None]]
) -> None:
    root, _ = swap_tree(tmp_path)
    sandbox = SandboxRoot(open_root(root))
    outcomes: Counter[str] = Counter()
    try:
        with swapping(root / "swap", root / "swap_link"):
            for _ in range(RACE_READS):
                try:
                    outcomes[read(sandbox, "swap/secret.txt").content] += 1
                except ToolFailure as exc:
                    outcomes[exc.problem.detail] += 1
    finally:
        sandbox.close()
    resolved_outside = f"'swap/secret.txt' {OUTSIDE}"
    caught_by_the_walk = f"'swap/secret.txt' {LINK_MET}"
    # The outside content never came back, and nothing but these three outcomes happened.
    assert set(outcomes) <= {"inside\n", resolved_outside, caught_by_the_walk}, outcomes
    # Every side of the race was seen: reads that got through, swaps seen by resolution,
    # and swaps that happened after resolution found a directory, caught by the walk.
    assert all(outcomes[key] > 0 for key in ("inside\n", resolved_outside, caught_by_the_walk)), (
        outcomes
    )


def test_exchange_swaps_a_directory_and_a_symlink(tmp_path: Path) -> None:
    root, outside = swap_tree(tmp_path)
    exchange(root / "swap", root / "swap_link")
    assert (root / "swap").resolve() == outside
    assert (root / "swap_link" / "secret.txt").read_bytes() == b"inside\n"


# --- the root ----------------------------------------------------------------------------


def test_root_reached_through_a_symlink_is_canonicalised(tree: FSTree) -> None:
    sandbox = SandboxRoot(open_root(tree.base / "root_via_link"))
    try:
        assert read(sandbox, "ok.txt").content == "hello\n"
        assert read(sandbox, f"{tree.root}/ok.txt").content == "hello\n"
        problem = refusal(sandbox, f"{tree.base}/root_via_link/ok.txt")
        assert (problem.code, problem.detail) == (ACCESS, f"The absolute path {OUTSIDE}")
    finally:
        sandbox.close()


def test_root_renamed_and_replaced_by_an_impostor(tmp_path: Path) -> None:
    root, outside = swap_tree(tmp_path)
    (root / "ok.txt").write_bytes(b"original\n")
    sandbox = SandboxRoot(open_root(root))
    root.rename(tmp_path / "root_moved")
    impostor = tmp_path / "root"
    impostor.mkdir()
    (impostor / "ok.txt").write_bytes(b"impostor\n")
    try:
        # Resolution starts beneath the canonical root and the walk from its descriptor, so
        # a new directory under the root's name changes nothing.
        assert read(sandbox, "ok.txt").content == "original\n"
        impostor.rename(tmp_path / "impostor")
        impostor.symlink_to(outside)
        # Nor does a symlink to the outside under that name: the file the caller asks for
        # is looked for in the directory opened at start-up, where it does not exist.
        problem = refusal(sandbox, "secret.txt")
        assert (problem.code, problem.detail) == (INVALID, "'secret.txt' does not exist")
        assert read(sandbox, "ok.txt").content == "original\n"
    finally:
        sandbox.close()


@pytest.mark.parametrize("make", ["missing", "file", "dangling"])
def test_root_that_cannot_be_opened_is_a_config_error(tmp_path: Path, make: str) -> None:
    path = tmp_path / "data"
    if make == "file":
        path.write_bytes(b"")
    elif make == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError) as info:
        build_fs_tool(Settings(safe_data_dir=path))
    assert info.value.variable == "MCP_SAFE_DATA_DIR"


def test_unset_root_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_fs_tool(Settings())


def test_close_is_idempotent_and_refuses_later_reads(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    before = open_descriptors()
    tool = build_fs_tool(Settings(safe_data_dir=tmp_path))
    assert tool.close is not None
    run(tool.close())
    run(tool.close())
    assert open_descriptors() == before
    with pytest.raises(ToolFailure) as info:
        run(tool.run(SandboxFSReadParams(relative_path="f")))
    assert info.value.problem.code is INTERNAL


def test_close_waits_for_reads_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The descriptor stays open until the last read that borrowed it finishes, so a
    # reused descriptor number can never anchor a walk.
    (tmp_path / "f").write_bytes(b"x")
    before = open_descriptors()
    sandbox = SandboxRoot(open_root(tmp_path))
    reading, release = threading.Event(), threading.Event()
    real_open = os.open

    def slow_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        reading.set()
        release.wait(10)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", slow_open)
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(read(sandbox, "f").content))
    worker.start()
    assert reading.wait(10)
    sandbox.close()
    assert open_descriptors() != before
    release.set()
    worker.join(10)
    assert results == ["x"]
    assert open_descriptors() == before


# --- the tool as the server sees it --------------------------------------------------------


def test_registry_serves_the_tool(tree: FSTree) -> None:
    registry = build_registry(Settings(safe_data_dir=tree.root, metrics_enabled=False))
    try:
        assert list(registry) == ["sandbox_fs_read"]
        tool = registry["sandbox_fs_read"]
        described = tool.description
        inputs, outputs = described.input_schema, described.output_schema
        # The root opened at start-up is the one the loaded tool reads from.
        assert not tool.is_loaded
        assert invoke(tool.spec(), {"relative_path": "ok.txt"}).structured["content"] == "hello\n"
        assert inputs["required"] == ["relative_path"]
        assert set(inputs["properties"]) == {"relative_path", "encoding", "max_bytes"}
        assert all(prop.get("description") for prop in inputs["properties"].values())
        assert inputs["properties"]["max_bytes"]["maximum"] == MAX_MAX_BYTES
        assert inputs["additionalProperties"] is False
        assert set(outputs["properties"]) == {
            "resolved_path",
            "content",
            "bytes_read",
            "truncated",
        }
    finally:
        asyncio.run(registry.aclose())


def test_read_runs_in_a_worker_thread(spec: ToolSpec[Any, Any]) -> None:
    main_thread = threading.get_ident()
    seen: list[int] = []
    real_read = os.read

    def recording_read(fd: int, size: int) -> bytes:
        seen.append(threading.get_ident())
        return real_read(fd, size)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "read", recording_read)
        output = invoke(spec, {"relative_path": "link_in", "max_bytes": 3})
    assert output.structured == {
        "resolved_path": "ok.txt",
        "content": "hel",
        "bytes_read": 3,
        "truncated": True,
    }
    assert seen
    assert main_thread not in seen


def test_result_text_is_the_structured_json(spec: ToolSpec[Any, Any]) -> None:
    output = invoke(spec, {"relative_path": "ok.txt"})
    assert json.loads(output.text) == output.structured


def test_file_type_is_checked_on_the_descriptor(
    sandbox: SandboxRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fstat on the open descriptor is the check that counts, whatever the name said.
    real_fstat = os.fstat

    def fifo_fstat(fd: int) -> os.stat_result:
        fields = list(real_fstat(fd))
        fields[0] = stat.S_IFIFO | 0o644
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fifo_fstat)
    assert refusal(sandbox, "ok.txt").detail == f"'ok.txt' {SPECIAL}"


def test_an_unloaded_tool_releases_the_root_it_opened(tree: FSTree) -> None:
    before = open_descriptors()
    registry = build_registry(Settings(safe_data_dir=tree.root, metrics_enabled=False))
    assert len(open_descriptors()) == len(before) + 1
    registry.release_unloaded()
    registry.release_unloaded()
    assert open_descriptors() == before
