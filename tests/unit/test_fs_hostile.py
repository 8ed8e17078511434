"""Whatever a file system holds, every call answers in-band and within the wire's bounds.

On main each of these answered -32603 with a traceback: a file whose mtime is before year 1
or after 9999 (anyone who can write a directory can `touch -d` it), a link to a name that is
not UTF-8, a 2**60-byte sparse file read near 2**53 (a next_offset past its own bound) or
listed (a size past I-JSON's range), a name longer than 255 characters. And listings showed
names the read tool then refused (bidi overrides, zero-width and control characters), raw.

The root is a tmpfs, which keeps any 64-bit time and any sparse size. The samples run in
every resolver mode; the property builds random trees of hostile names, link targets, times
and sizes and holds every mode to the same answers, and to what the tree holds.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server_suite.guardrails.sanitizer import ensure_clean_arguments
from mcp_server_suite.schemas.errors import PolicyViolation
from mcp_server_suite.schemas.fs import MAX_OFFSET, SandboxFSListResult, SandboxFSReadResult
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from tests.support.fs_child import ALL_MODES, USERS, Served, served
from tests.support.fs_tree import mounted

pytestmark = pytest.mark.root

UNNAMEABLE = (
    "resolves to a name that no argument can carry (not valid UTF-8, or holding a control or "
    "format character), which the sandbox never shows"
)

# Names the argument sanitizer refuses: each would be listed raw on main.
REFUSED_NAMES = ["a\u202eb", "z\u200b", "\x1b[31m", "\ufeffbom", "t\U000e0041", "n\x85", "d\x7f"]
REFUSED_NAMES += ["s\xad"]


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hostile")
    with mounted("tmpfs", root, "-t", "tmpfs", "-o", "mode=0755"):
        yield root


def _build_samples(root: Path) -> None:
    (root / "old.txt").write_bytes(b"old\n")
    os.utime(root / "old.txt", ns=(0, -99_999_999_999 * 10**9))
    (root / "future.txt").write_bytes(b"future\n")
    os.utime(root / "future.txt", ns=(0, 253_402_300_800 * 10**9))
    (root / "last.txt").write_bytes(b"last\n")
    os.utime(root / "last.txt", ns=(0, 253_402_300_799 * 10**9 + 999_999_999))
    with open(root / "sparse.bin", "wb") as sparse:
        sparse.truncate(2**60)
    byte_root = os.fsencode(root)
    with open(os.path.join(byte_root, b"\xff"), "wb") as odd:
        odd.write(b"odd name\n")
    os.mkdir(os.path.join(byte_root, b"dir\xff"))
    os.symlink(b"\xff", os.path.join(byte_root, b"to_ff"))
    os.symlink(b"dir\xff", os.path.join(byte_root, b"to_dir_ff"))
    for name in REFUSED_NAMES:
        (root / name).write_bytes(b"hidden name\n")
    (root / "to_rlo").symlink_to("a\u202eb")
    (root / "dir\u202e").mkdir()
    (root / "through").symlink_to("dir\u202e/../old.txt")


@pytest.fixture(scope="module")
def samples(tmpfs: Path) -> Path:
    root = tmpfs / "samples"
    root.mkdir()
    _build_samples(root)
    return root


COMBINATIONS = list(itertools.product(ALL_MODES, USERS))


@pytest.fixture(
    scope="module", params=COMBINATIONS, ids=[f"{mode}-{user}" for mode, user in COMBINATIONS]
)
def tools(samples: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    mode, user = request.param
    with served(samples, mode, user=user) as built:
        yield built


def test_times_outside_years_1_to_9999_are_null(tools: Served) -> None:
    answer = tools.list({})
    assert isinstance(answer, dict), answer.detail
    entries = {entry["name"]: entry for entry in answer["entries"]}
    assert entries["old.txt"]["modified"] is None
    assert entries["future.txt"]["modified"] is None
    assert entries["last.txt"]["modified"] == "9999-12-31T23:59:59.999999+00:00"
    assert entries["old.txt"]["type"] == "file"


def test_sizes_past_the_exact_range_are_null(tools: Served) -> None:
    answer = tools.list({})
    assert isinstance(answer, dict), answer.detail
    entries = {entry["name"]: entry for entry in answer["entries"]}
    assert entries["sparse.bin"] == {**entries["sparse.bin"], "type": "file", "size": None}


@pytest.mark.parametrize("max_bytes", [1, 8, 9, 64, 1024])
def test_a_read_never_offers_an_offset_past_the_bound(tools: Served, max_bytes: int) -> None:
    offset = MAX_OFFSET - 8
    answer = tools.read(
        {
            "relative_path": "sparse.bin",
            "encoding": "latin-1",
            "offset": offset,
            "max_bytes": max_bytes,
        }
    )
    assert isinstance(answer, dict), answer.detail
    assert answer["next_offset"] <= MAX_OFFSET
    assert answer["bytes_read"] == min(max_bytes, 8)
    # The last piece that can be read says so: nothing after MAX_OFFSET is offered.
    assert answer["truncated"] is (max_bytes < 8)
    if answer["truncated"]:
        following = tools.read(
            {
                "relative_path": "sparse.bin",
                "encoding": "latin-1",
                "offset": answer["next_offset"],
                "max_bytes": 1024,
            }
        )
        assert isinstance(following, dict)


def test_a_name_passed_through_on_the_way_is_not_shown(tools: Served) -> None:
    answer = tools.read({"relative_path": "through"})
    assert isinstance(answer, dict), answer.detail
    assert (answer["resolved_path"], answer["content"]) == ("old.txt", "old\n")


@pytest.mark.parametrize("path", ["to_ff", "to_dir_ff", "to_rlo"])
def test_links_to_names_no_argument_can_carry_are_refused(tools: Served, path: str) -> None:
    answer = tools.read({"relative_path": path})
    assert isinstance(answer, Problem), answer
    assert (answer.code, answer.detail) == (MCPErrorCode.ACCESS_DENIED, f"{path!r} {UNNAMEABLE}")
    listed = tools.list({"relative_path": path})
    assert isinstance(listed, Problem), listed
    assert listed.code is MCPErrorCode.ACCESS_DENIED


def test_listed_names_are_names_a_read_takes(tools: Served) -> None:
    answer = tools.list({"max_entries": 1000})
    assert isinstance(answer, dict), answer.detail
    names = [entry["name"] for entry in answer["entries"]]
    # \xff and dir\xff are not UTF-8; the rest hold characters the sanitizer refuses.
    assert answer["unnamed_entries"] == 3 + len(REFUSED_NAMES)
    assert not set(names) & set(REFUSED_NAMES)
    text = json.dumps(answer, ensure_ascii=False)
    for char in ("\u202e", "\u200b", "\x1b", "\ufeff"):
        assert char not in text
    types = {entry["name"]: entry["type"] for entry in answer["entries"]}
    assert types["to_ff"] == types["to_rlo"] == "other"
    assert types["through"] == "symlink"
    for name in names:
        ensure_clean_arguments(name)
        back = tools.read({"relative_path": name, "encoding": "latin-1", "max_bytes": 8})
        assert not (isinstance(back, Problem) and "does not exist" in back.detail), name


# --- generated trees -------------------------------------------------------------------------

name_chars = st.one_of(
    st.sampled_from("abc.-_ "),
    st.sampled_from("\u202e\u200b\x1b\ufeff\x85\x7f\xad\t\n\u00e9\U0001f600"),
    st.characters(codec="utf-8", exclude_characters="/\x00"),
)
names = st.one_of(
    st.text(alphabet=name_chars, min_size=1, max_size=8).filter(lambda n: n not in (".", "..")),
    st.binary(min_size=1, max_size=6)
    .filter(lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b".."))
    .map(os.fsdecode),
)
times = st.one_of(
    st.integers(-(2**62), 2**62),
    st.sampled_from([-99_999_999_999 * 10**9, 253_402_300_800 * 10**9, 0, -1]),
)
sizes = st.one_of(st.integers(0, 64), st.sampled_from([2**53 - 1, 2**53, 2**60]))


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str, Any]]:
    """Entries of a two-level tree: (path, kind, detail) with kind file, dir or link."""
    entries: list[tuple[str, str, Any]] = []
    top = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    for name in top:
        kind = draw(st.sampled_from(["file", "dir", "link"]))
        if kind == "file":
            entries.append((name, "file", (draw(sizes), draw(times))))
        elif kind == "dir":
            entries.append((name, "dir", draw(times)))
            entries.extend(
                (f"{name}/{inner}", "file", (draw(st.integers(0, 8)), draw(times)))
                for inner in draw(st.lists(names, max_size=3, unique=True))
            )
        else:
            target = draw(
                st.lists(
                    st.one_of(st.sampled_from(top), st.just(".."), names), min_size=1, max_size=3
                )
            )
            entries.append((name, "link", "/".join(target)))
    return entries


def _make(base: Path, entries: list[tuple[str, str, Any]]) -> None:
    raw = os.fsencode(base)
    for path, kind, detail in entries:
        where = os.path.join(raw, os.fsencode(path))
        if kind == "dir":
            os.mkdir(where)
        elif kind == "link":
            os.symlink(os.fsencode(detail), where)
        else:
            size, _ = detail
            with open(where, "wb") as handle:
                handle.truncate(size)
    # Times last: making a directory's entries changes its time.
    for path, kind, detail in reversed(entries):
        if kind != "link":
            mtime = detail if kind == "dir" else detail[1]
            os.utime(os.path.join(raw, os.fsencode(path)), ns=(0, mtime), follow_symlinks=False)


def _nameable(name: str) -> bool:
    try:
        name.encode("utf-8")
        ensure_clean_arguments(name)
    except (UnicodeEncodeError, PolicyViolation):
        return False
    return True


def _expected_listing(directory: Path) -> tuple[dict[str, tuple[str, int | None]], int]:
    """The reference: each nameable entry's type (links aside) and size, and the rest."""
    expected: dict[str, tuple[str, int | None]] = {}
    unnamed = 0
    for name in os.listdir(directory):
        if not _nameable(name):
            unnamed += 1
            continue
        status = os.lstat(directory / name)
        if stat.S_ISREG(status.st_mode):
            expected[name] = ("file", status.st_size if status.st_size <= MAX_OFFSET else None)
        elif stat.S_ISDIR(status.st_mode):
            expected[name] = ("directory", None)
        else:
            expected[name] = ("link", None)
    return expected, unnamed


@pytest.fixture(scope="module")
def generated(tmpfs: Path) -> Iterator[tuple[Path, list[Served]]]:
    base = tmpfs / "generated"
    base.mkdir()
    with (
        served(base, "kernel") as kernel,
        served(base, "walk") as walk,
        served(base, "noproc") as noproc,
        served(base, "noproc-walk") as noproc_walk,
    ):
        yield base, [kernel, walk, noproc, noproc_walk]


_counter = iter(range(10**9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=trees())
def test_generated_trees_answer_in_band_alike_in_every_mode(
    generated: tuple[Path, list[Served]], entries: list[tuple[str, str, Any]]
) -> None:
    base, modes = generated
    name = f"t{next(_counter)}"
    (base / name).mkdir()
    _make(base / name, entries)
    expected, unnamed = _expected_listing(base / name)
    calls: list[tuple[str, dict[str, Any]]] = [("list", {"relative_path": name})]
    for path, _, _ in entries:
        if "/" not in path and _nameable(path):
            calls.append(
                (
                    "read",
                    {
                        "relative_path": f"{name}/{path}",
                        "encoding": "latin-1",
                        "max_bytes": 16,
                        "offset": MAX_OFFSET - 4,
                    },
                )
            )
            calls.append(("list", {"relative_path": f"{name}/{path}"}))
    # Every answer is a result within its contract, or a problem: an exception here would be
    # the -32603 of main.
    answers = [[getattr(tools, tool)(arguments) for tool, arguments in calls] for tools in modes]
    assert all(each == answers[0] for each in answers[1:])
    for (tool, _), answer in zip(calls, answers[0], strict=True):
        if isinstance(answer, Problem):
            assert answer.code is not MCPErrorCode.INTERNAL_ERROR, answer.detail
            continue
        model = SandboxFSListResult if tool == "list" else SandboxFSReadResult
        model.model_validate(answer)
    listing = answers[0][0]
    assert isinstance(listing, dict), listing.detail
    assert listing["unnamed_entries"] == unnamed
    assert {entry["name"] for entry in listing["entries"]} == set(expected)
    for entry in listing["entries"]:
        kind, size = expected[entry["name"]]
        if kind == "link":
            assert entry["type"] in ("symlink", "other")
        else:
            assert (entry["type"], entry["size"]) == (kind, size)
        if entry["modified"] is not None:
            assert datetime.fromisoformat(entry["modified"]).year >= 1
