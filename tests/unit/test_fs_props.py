"""The file tools against independent oracles, over random paths and random bytes.

Traversal: random relative paths built from `..`, `.`, empty components, the fixture's own
names (its symlinks in and out, loops, chains, special files, the sibling directories) and
arbitrary Unicode names, joined by `/` or `//`, plus walks that follow the real tree. Three
things hold for every one of them, with both resolvers:

- the answer is the reference resolver's: a short resolver written here over string paths
  with `lstat` and `readlink`, with the kernel's rules (40 links, `..` above the root and
  absolute links refused, a trailing `/` after a file refused), that shares no code with the
  tool;
- the kernel's `openat2` and the walk give the same answer, problem text included;
- the answer does not change when everything outside the root changes.

Decoding: random bytes, caps and offsets against a UTF-8 validity oracle written from the
encoding's definition, not with an incremental decoder.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from mcp_server_suite.schemas.problems import Problem
from tests.support.fs_tools import FileTools, call, file_tools
from tests.support.fs_tree import OUTSIDE_SECRETS, FSTree, build_fs_tree, ensure_complete

# Links added to the round 1 tree, so random paths also meet the kernel's rules: a chain
# of 40 (followed) and of 41 (refused), a link to '.', to '..', to the root by absolute
# path, targets with '//' and './', a trailing '/' after a file, a link into itself.
EXTRA_LINKS: Final = {
    "me": ".",
    "up": "..",
    "root_abs": "{ROOT}",
    "msl": "sub//./inner.txt",
    "ts_slash": "ok.txt/",
    "ts_dot": "ok.txt/.",
    "ld": "ld/x",
    "deep": "sub/deeper",
    **{f"k40_{index}": f"k40_{index + 1}" for index in range(39)},
    "k40_39": "ok.txt",
    **{f"k41_{index}": f"k41_{index + 1}" for index in range(40)},
    "k41_40": "ok.txt",
}

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
    "Case.txt",
    "caf\u00e9.txt",
    "new\nline.txt",
    "empty.txt",
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
    "etc",
    "passwd",
    "me",
    "up",
    "root_abs",
    "msl",
    "ts_slash",
    "ts_dot",
    "ld",
    "deep",
    "k40_0",
    "k41_0",
    "k40_20",
)

names = st.text(
    # The utf-8 codec leaves out lone surrogates; control and format characters are the
    # sanitizer's to refuse, before any of this runs (tab, line feed and return it lets by).
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_characters="/", exclude_categories=("Cc", "Cf")),
        st.sampled_from("\t\n\r"),
    ),
    min_size=1,
    max_size=12,
)
components = st.one_of(
    st.sampled_from(FIXTURE_NAMES),
    st.sampled_from(("..", ".", "")),
    names,
)


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
    """A path that follows the real tree: each step names an entry of where it has got to."""
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
        if os.path.isfile(here) and draw(st.integers(0, 3)):
            break
    return "/".join(parts).lstrip("/") or "."


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    built = ensure_complete(build_fs_tree(tmp_path_factory.mktemp("fsprops") / "base"))
    for name, target in EXTRA_LINKS.items():
        (built.root / name).symlink_to(target.replace("{ROOT}", str(built.root)))
    return built


@pytest.fixture(scope="module")
def kernel(tree: FSTree) -> Iterator[FileTools]:
    with file_tools(tree.root, "kernel") as built:
        yield built


@pytest.fixture(scope="module")
def walk(tree: FSTree) -> Iterator[FileTools]:
    with file_tools(tree.root, "walk") as built:
        yield built


# --- the reference resolver ----------------------------------------------------------------

MAX_LINKS: Final = 40
NAME_MAX: Final = 255


def reference(root: str, path: str) -> tuple[str, object]:
    """What reading `path` beneath `root` must give, worked out over string paths.

    Returns:
        ("read", (canonical path, bytes)), ("errno", errno), or ("special", None).
    """
    pending = path.split("/")[::-1]
    held: list[str] = []
    links = 0
    while pending:
        piece = pending.pop()
        if piece in ("", "."):
            continue
        if piece == "..":
            if not held:
                return "errno", errno.EXDEV
            held.pop()
            continue
        if len(piece.encode()) > NAME_MAX:
            return "errno", errno.ENAMETOOLONG
        here = os.path.join(root, *held, piece)
        try:
            status = os.lstat(here)
        except FileNotFoundError:
            return "errno", errno.ENOENT
        if stat.S_ISLNK(status.st_mode):
            links += 1
            if links > MAX_LINKS:
                return "errno", errno.ELOOP
            target = os.readlink(here)
            if target.startswith("/"):
                return "errno", errno.EXDEV
            pending.extend(target.split("/")[::-1])
        elif stat.S_ISDIR(status.st_mode):
            held.append(piece)
        else:
            return _leaf(here, "/".join((*held, piece)), status, more=bool(pending))
    return "errno", errno.EISDIR


def _leaf(here: str, canonical: str, status: os.stat_result, *, more: bool) -> tuple[str, object]:
    if more:
        return "errno", errno.ENOTDIR
    if not stat.S_ISREG(status.st_mode):
        return "special", None
    with open(here, "rb") as handle:
        return "read", (canonical, handle.read(64))


PHRASES: Final = {
    "resolves outside the sandbox": errno.EXDEV,
    "does not exist": errno.ENOENT,
    "has a component that is not a directory": errno.ENOTDIR,
    "names a directory, not a file": errno.EISDIR,
    "meets more than 40 symbolic links (a loop), or a /proc link the sandbox never follows": (
        errno.ELOOP
    ),
    "has a name, or resolves to a path, longer than the file system or the sandbox allows": (
        errno.ENAMETOOLONG
    ),
}


def answer(tools: FileTools, path: str) -> tuple[str, object]:
    """The tool's answer in the reference resolver's terms."""
    result = call(tools.read, {"relative_path": path, "encoding": "latin-1", "max_bytes": 64})
    if isinstance(result, Problem):
        if result.detail.endswith("is not opened"):
            return "special", None
        phrase = result.detail.split(" ", 1)[1] if result.detail[0] != "'" else ""
        for text, error in PHRASES.items():
            if result.detail.endswith(text):
                return "errno", error
        return "problem", phrase or result.detail
    return "read", (result["resolved_path"], result["content"].encode("latin-1"))


def check(tree: FSTree, kernel: FileTools, walk: FileTools, path: str) -> None:
    expected = reference(str(tree.root), path)
    kind, detail = expected
    event(f"{kind} {errno.errorcode[detail] if isinstance(detail, int) else ''}")
    got = answer(kernel, path)
    assert got == expected
    # The two resolvers agree to the letter, problem texts included.
    assert call(walk.read, {"relative_path": path}) == call(kernel.read, {"relative_path": path})
    if got[0] == "read":
        content = got[1][1]  # type: ignore[index]  # ("read", (path, bytes))
        assert not any(content.startswith(secret[:64]) for secret in OUTSIDE_SECRETS)


@given(path=relative_paths())
@example(path="link_in")
@example(path="sub/deeper/../../ok.txt")
@example(path="link_dir_out/../root/ok.txt")
@example(path="link_evil/secret.txt")
@example(path="loop_a/../../outside/secret.txt")
@example(path="me/" * 41 + "ok.txt")
@example(path="me/" * 39 + "ok.txt")
@example(path="deep/../inner.txt")
@example(path="ts_slash")
@example(path="k40_0/")
def test_arbitrary_paths_are_resolved_as_the_reference_says(
    tree: FSTree, kernel: FileTools, walk: FileTools, path: str
) -> None:
    check(tree, kernel, walk, path)


@given(data=st.data())
def test_tree_walks_are_resolved_as_the_reference_says(
    tree: FSTree, kernel: FileTools, walk: FileTools, data: st.DataObject
) -> None:
    check(tree, kernel, walk, data.draw(tree_walks(str(tree.root)), label="path"))


@given(path=relative_paths())
def test_an_absolute_path_under_the_root_reads_like_its_rest(
    tree: FSTree, kernel: FileTools, walk: FileTools, path: str
) -> None:
    for tools in (kernel, walk):
        assert answer(tools, f"{tree.root}/{path}") == answer(tools, path)


@given(path=relative_paths(), base=st.sampled_from(("outside", "root_evil", "root_via_link")))
def test_an_absolute_path_outside_the_root_is_denied_unread(
    tree: FSTree, kernel: FileTools, walk: FileTools, path: str, base: str
) -> None:
    for tools in (kernel, walk):
        result = call(tools.read, {"relative_path": f"{tree.base}/{base}/{path}"})
        assert isinstance(result, Problem)
        assert result.detail == "The absolute path resolves outside the sandbox"


# --- nothing outside is ever consulted -----------------------------------------------------

OUTSIDE_STATES: Final = ("as built", "emptied", "every name a link", "every name a FIFO")


def rebuild_outside(tree: FSTree, state: str) -> None:
    """Put the outside (and the prefix sibling) in one of a few very different states."""
    for directory in (tree.outside, tree.evil):
        shutil.rmtree(directory)
        directory.mkdir()
    if state == "as built":
        (tree.outside / "secret.txt").write_bytes(OUTSIDE_SECRETS[0])
        (tree.outside / "secret_hl.txt").write_bytes(b"hardlinked secret\n")
        (tree.evil / "secret.txt").write_bytes(OUTSIDE_SECRETS[1])
        return
    for name in ("secret.txt", "created_later", "root", "ok.txt", "sub"):
        for directory in (tree.outside, tree.evil):
            if state == "every name a link":
                (directory / name).symlink_to(tree.root / "ok.txt")
            elif state == "every name a FIFO":
                os.mkfifo(directory / name)


@given(path=st.one_of(relative_paths(), st.just("../outside/secret.txt/../../root/ok.txt")))
def test_the_outside_never_changes_an_answer(
    tree: FSTree, kernel: FileTools, walk: FileTools, path: str
) -> None:
    # The corpus's oracle class: what exists outside the root must not show in any answer.
    seen = set()
    try:
        for state in OUTSIDE_STATES:
            rebuild_outside(tree, state)
            for tools in (kernel, walk):
                result = call(tools.read, {"relative_path": path})
                seen.add(result.as_text() if isinstance(result, Problem) else repr(result))
    finally:
        rebuild_outside(tree, "as built")
    assert len(seen) == 1, seen


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


def expected_decoding(data: bytes, max_bytes: int, offset: int) -> tuple[str, int, int] | None:
    """What a strict read of `data` from `offset`, capped at `max_bytes`, must give.

    Returns:
        (text, where it starts, bytes decoded), or None where the read is refused.
    """
    start = offset
    if offset > 0:
        # Continuation bytes (10xxxxxx) at the start belong to a character before: at most
        # three are skipped, judged on the window and the one byte after it.
        seen = data[offset : offset + max_bytes + 1]
        skip = 0
        while skip < min(3, len(seen)) and seen[skip] >> 6 == 0b10:
            skip += 1
        start = offset + skip
    head = data[start : offset + max_bytes]
    if len(data) <= offset + max_bytes:
        try:
            return head.decode("utf-8"), start, len(head)
        except UnicodeDecodeError:
            return None
    for cut in range(len(head), max(len(head) - 3, 0) - 1, -1):
        try:
            text = head[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if cut == len(head) or _is_utf8_prefix(head[cut:]):
            return text, start, cut
    return None


utf8_ish = st.lists(
    st.one_of(
        st.text(max_size=4).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.binary(max_size=2),
    ),
    max_size=12,
).map(b"".join)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FileTools, Path]]:
    directory = tmp_path_factory.mktemp("decode")
    with file_tools(directory, "kernel") as built:
        yield built, directory / "f"


@given(data=utf8_ish, max_bytes=st.integers(1, 40), offset=st.integers(0, 12))
@example(data="caf\u00e9".encode(), max_bytes=4, offset=0)
@example(data=b"\xf0\x9f\x98\x80", max_bytes=3, offset=0)
@example(data=b"\xed\xa0\x80", max_bytes=2, offset=0)
@example(data=b"a\xe2\x82\xacb", max_bytes=9, offset=2)
def test_utf8_cut_and_count(
    scratch: tuple[FileTools, Path], data: bytes, max_bytes: int, offset: int
) -> None:
    tools, file = scratch
    file.write_bytes(data)
    expected = expected_decoding(data, max_bytes, offset)
    result = call(tools.read, {"relative_path": "f", "max_bytes": max_bytes, "offset": offset})
    if expected is None:
        assert isinstance(result, Problem)
        assert result.invalid_params == ("encoding",)
        return
    assert isinstance(result, dict)
    assert expected == (result["content"], result["offset"], result["bytes_read"])
    end = result["offset"] + result["bytes_read"]
    assert result["next_offset"] == end
    assert result["truncated"] == (len(data) > offset + max_bytes)
    assert result["content"] == data[result["offset"] : end].decode("utf-8")
