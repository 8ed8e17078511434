"""`sandbox_fs_read` against independent oracles, over random paths and random bytes.

Traversal: random relative paths built from `..`, `.`, empty components, the fixture's own
names (its symlinks in and out, loops, special files, the sibling directories) and arbitrary
Unicode names, joined by `/` or `//`. The oracle is `os.path.realpath` plus containment by
`os.path.commonpath` (a different component-wise test from the tool's), the rule that a
path ending in `/`, `.` or `..` names no file, and `os.stat` on the result: the tool must read
exactly when the oracle finds a regular file inside the root, return the same bytes, and
refuse as outside exactly when the oracle's target is outside.

Decoding: random bytes and caps against a UTF-8 validity oracle written from the encoding's
definition, not with an incremental decoder.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import SandboxFSReadParams
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.fs.read import SandboxRoot
from mcp_server_suite.tools.fs.root import open_root
from tests.support.fs_tree import OUTSIDE_SECRETS, FSTree, build_fs_tree, ensure_complete

# Every name the fixture holds, at any level, and the names of its neighbours: random
# paths made of them walk through the symlinks, loops and special files on purpose.
FIXTURE_NAMES: Final = (
    "ok.txt",
    "sub",
    "deeper",
    "inner.txt",
    "d.txt",
    "%2e%2e",
    "literal.txt",
    "dir_only",
    "...",
    "..foo",
    "foo..",
    "Case.txt",
    "caf\u00e9.txt",
    "new\nline.txt",
    "empty.txt",
    "big.txt",
    "binary.bin",
    "link_out",
    "link_out_rel",
    "link_in",
    "link_in_dir",
    "link_dir_out",
    "loop_a",
    "loop_b",
    "self_loop",
    "dangling",
    "dangling_out",
    "zero",
    "proc_root",
    "link_evil",
    "hard_out",
    "fifo",
    "null_dev",
    "sock",
    "root",
    "outside",
    "root_evil",
    "root_via_link",
    "secret.txt",
    "secret_hl.txt",
    "etc",
    "passwd",
)

OUTSIDE: Final = "outside"

names = st.text(
    # The utf-8 codec leaves out lone surrogates, which the argument model refuses anyway.
    alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"),
    min_size=1,
    max_size=12,
)
components = st.one_of(
    st.sampled_from(FIXTURE_NAMES),
    st.sampled_from(("..", ".", "")),
    names,
)


def oracle_realpath(path: str) -> str:
    """`os.path.realpath`, with runs of slashes collapsed first.

    Before Python 3.13, realpath resolved a symlink loop followed by an empty component
    (`loop_a//ok.txt`) to the file system root (`/ok.txt`); collapsing `//`, which names
    the same path, keeps the oracle to what the path means on every version.
    """
    return os.path.realpath(re.sub("/+", "/", path))


@st.composite
def relative_paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(components, min_size=1, max_size=8))
    separator = draw(st.sampled_from(("/", "//")))
    path = separator.join(parts)
    if draw(st.booleans()):
        path = "./" + path
    # A path that starts with '/' is absolute: that is the other property's business.
    return path.lstrip("/") or "."


@st.composite
def tree_walks(draw: st.DrawFn, root: str) -> str:
    """A path that follows the real tree: each step names an entry of where it has got to.

    Steps go through symlinks (in and out), up with '..' past the root and back in, so
    many of these paths read a file; the arbitrary paths above mostly do not.
    """
    parts: list[str] = []
    here = root
    for _ in range(draw(st.integers(1, 6))):
        try:
            entries = sorted(os.listdir(here)) if os.path.isdir(here) else []
        except OSError:
            entries = []
        step = draw(st.sampled_from([*entries, "..", ".", ""]))
        parts.append(step)
        here = os.path.join(here, step)
        # Usually stop at a file; going on makes 'ok.txt/..' and its kind.
        if os.path.isfile(here) and draw(st.integers(0, 3)):
            break
    return "/".join(parts).lstrip("/") or "."


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    # CI runs as root, so the device and the socket are always made: nothing may skip.
    return ensure_complete(build_fs_tree(tmp_path_factory.mktemp("fsprops") / "base"))


@pytest.fixture(scope="module")
def sandbox(tree: FSTree) -> Iterator[SandboxRoot]:
    root = SandboxRoot(open_root(tree.root))
    yield root
    root.close()


def oracle(root: str, path: str, max_bytes: int) -> bytes | str | None:
    """What a read must give: the bytes, `OUTSIDE`, or None for any other refusal."""
    target = oracle_realpath(os.path.join(root, path))
    if os.path.commonpath((root, target)) != root:
        return OUTSIDE
    if path.rsplit("/", 1)[-1] in ("", ".", ".."):
        return None
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode):
        return None
    with open(target, "rb") as handle:
        return handle.read(max_bytes)


def outcome(sandbox: SandboxRoot, path: str, max_bytes: int) -> tuple[bytes | None, str]:
    """The tool's answer: the bytes read (latin-1 maps bytes to text one to one) or None."""
    params = SandboxFSReadParams(relative_path=path, encoding="latin-1", max_bytes=max_bytes)
    try:
        result = sandbox.read_blocking(params)
    except ToolFailure as exc:
        return None, exc.problem.detail if exc.problem.code is MCPErrorCode.ACCESS_DENIED else ""
    return result.content.encode("latin-1"), result.resolved_path


def check_against_the_oracle(sandbox: SandboxRoot, tree: FSTree, path: str, max_bytes: int) -> None:
    root = str(tree.root)
    expected = oracle(root, path, max_bytes)
    content, detail = outcome(sandbox, path, max_bytes)
    event("read" if isinstance(expected, bytes) else expected or "refused")
    if isinstance(expected, bytes):
        assert content == expected
        target = oracle_realpath(os.path.join(root, path))
        assert detail == os.path.relpath(target, root)
    else:
        assert content is None
        if expected == OUTSIDE:
            assert detail.endswith("resolves outside the sandbox")
        assert root not in detail
    if content is not None:
        assert not any(content.startswith(secret[:max_bytes]) for secret in OUTSIDE_SECRETS)


@given(path=relative_paths(), max_bytes=st.integers(1, 64))
@example(path="link_in", max_bytes=64)
@example(path="sub/deeper/../../ok.txt", max_bytes=64)
@example(path="link_dir_out/../root/ok.txt", max_bytes=64)
@example(path="link_evil/secret.txt", max_bytes=64)
@example(path="loop_a/../../outside/secret.txt", max_bytes=64)
def test_arbitrary_paths_read_exactly_what_the_oracle_allows(
    sandbox: SandboxRoot, tree: FSTree, path: str, max_bytes: int
) -> None:
    check_against_the_oracle(sandbox, tree, path, max_bytes)


@given(data=st.data(), max_bytes=st.integers(1, 64))
def test_tree_walks_read_exactly_what_the_oracle_allows(
    sandbox: SandboxRoot, tree: FSTree, data: st.DataObject, max_bytes: int
) -> None:
    path = data.draw(tree_walks(str(tree.root)), label="path")
    check_against_the_oracle(sandbox, tree, path, max_bytes)


@given(path=relative_paths(), max_bytes=st.integers(1, 64))
def test_an_absolute_path_under_the_root_reads_like_its_rest(
    sandbox: SandboxRoot, tree: FSTree, path: str, max_bytes: int
) -> None:
    relative_content, _ = outcome(sandbox, path, max_bytes)
    absolute_content, _ = outcome(sandbox, f"{tree.root}/{path}", max_bytes)
    assert absolute_content == relative_content


@given(path=relative_paths(), base=st.sampled_from(("outside", "root_evil", "root_via_link")))
def test_an_absolute_path_outside_the_root_is_denied_unread(
    sandbox: SandboxRoot, tree: FSTree, path: str, base: str
) -> None:
    params = SandboxFSReadParams(relative_path=f"{tree.base}/{base}/{path}")
    with pytest.raises(ToolFailure) as info:
        sandbox.read_blocking(params)
    assert info.value.problem.code is MCPErrorCode.ACCESS_DENIED
    assert info.value.problem.detail == "The absolute path resolves outside the sandbox"


# --- decoding ------------------------------------------------------------------------------


def _is_utf8_prefix(tail: bytes) -> bool:
    """True when `tail` is the start of one UTF-8 character that more bytes can complete.

    Only the second byte of a sequence has a lead-dependent range (E0 A0..BF, ED 80..9F,
    F0 90..BF, F4 80..8F), so every second byte is tried and later bytes are 0x80.

    Completion is judged with `surrogatepass`, because CPython's decoder holds back the
    start of an encoded surrogate (ED A0..BF) at a cut rather than refusing it: that handler
    could still need it. So a cut read drops such a tail, which `max_bytes` kept from being
    decoded, and never returns it.
    """
    if not 1 <= len(tail) <= 3:
        return False
    seconds = [bytes([value]) for value in range(0x80, 0xC0)] if len(tail) == 1 else [b""]
    for second in seconds:
        stem = tail + second
        for length in range(len(tail) + 1, 5):
            candidate = (stem + b"\x80" * 4)[:length]
            try:
                if len(candidate.decode("utf-8", "surrogatepass")) == 1:
                    return True
            except UnicodeDecodeError:
                continue
    return False


def expected_decoding(data: bytes, max_bytes: int) -> tuple[str, int] | None:
    """What a strict read of `data` capped at `max_bytes` must give, or None if refused."""
    head = data[:max_bytes]
    if len(data) <= max_bytes:
        try:
            return head.decode("utf-8"), len(head)
        except UnicodeDecodeError:
            return None
    for cut in range(len(head), max(len(head) - 3, 0) - 1, -1):
        try:
            text = head[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if cut == len(head) or _is_utf8_prefix(head[cut:]):
            return text, cut
    return None


utf8_ish = st.lists(
    st.one_of(
        st.text(max_size=4).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.binary(max_size=2),
    ),
    max_size=12,
).map(b"".join)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SandboxRoot, Path]]:
    directory = tmp_path_factory.mktemp("decode")
    root = SandboxRoot(open_root(directory))
    yield root, directory / "f"
    root.close()


@given(data=utf8_ish, max_bytes=st.integers(1, 40))
@example(data="caf\u00e9".encode(), max_bytes=4)
@example(data=b"\xf0\x9f\x98\x80", max_bytes=3)
@example(data=b"\xed\xa0\x80", max_bytes=2)
def test_utf8_cut_and_count(scratch: tuple[SandboxRoot, Path], data: bytes, max_bytes: int) -> None:
    root, file = scratch
    file.write_bytes(data)
    expected = expected_decoding(data, max_bytes)
    params = SandboxFSReadParams(relative_path="f", max_bytes=max_bytes)
    if expected is None:
        with pytest.raises(ToolFailure) as info:
            root.read_blocking(params)
        assert info.value.problem.invalid_params == ("encoding",)
        return
    result = root.read_blocking(params)
    assert expected == (result.content, result.bytes_read)
    assert result.truncated == (len(data) > max_bytes)
    assert result.content == data[: result.bytes_read].decode("utf-8")
