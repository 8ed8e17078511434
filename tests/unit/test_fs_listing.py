"""`sandbox_fs_list`: one directory's entries, with the same containment as a read.

Run with both resolvers over the round 1 fixture: entry types (and which links count as
staying inside), sizes and times, sorting and the entry cap, names that are not UTF-8, every
route out refused as a read is, and the bound on the response.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.schemas.fs import MAX_MAX_ENTRIES, MAX_NAME_CHARS, SandboxFSListParams
from mcp_server_suite.schemas.problems import MCPErrorCode, Problem
from mcp_server_suite.tools.fs import listing
from mcp_server_suite.tools.fs.read import MAX_RESPONSE_BYTES
from tests.support.fs_tools import MODES, FileTools, as_nobody, call, file_tools, response_bytes
from tests.support.fs_tree import FSTree, build_fs_tree, ensure_complete

OUTSIDE = "resolves outside the sandbox"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> FSTree:
    return ensure_complete(build_fs_tree(tmp_path_factory.mktemp("fslist") / "base"))


@pytest.fixture(scope="module", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def tools(tree: FSTree, mode: str) -> Iterator[FileTools]:
    with file_tools(tree.root, mode) as built:
        yield built


def listed(tools: FileTools, **arguments: Any) -> dict[str, Any]:
    answer = call(tools.list, arguments)
    assert isinstance(answer, dict), answer.detail
    return answer


# Every entry of the fixture's root, with what the listing must call it.
TYPES = {
    "...": "file",
    "..foo": "file",
    "%2e%2e": "directory",
    "Case.txt": "file",
    "big.txt": "file",
    "binary.bin": "file",
    "caf\u00e9.txt": "file",
    "dangling": "other",
    "dangling_out": "other",
    "dir_only": "directory",
    "empty.txt": "file",
    "fifo": "other",
    "foo..": "file",
    "hard_out": "file",
    "link_dir_out": "other",
    "link_evil": "other",
    "link_in": "symlink",
    "link_in_dir": "symlink",
    "link_out": "other",
    "link_out_rel": "other",
    "loop_a": "other",
    "loop_b": "other",
    "new\nline.txt": "file",
    "null_dev": "other",
    "ok.txt": "file",
    "proc_root": "other",
    "self_loop": "other",
    "sock": "other",
    "sub": "directory",
    "zero": "other",
}


def test_the_root_is_listed_by_name_with_types(tools: FileTools, tree: FSTree) -> None:
    answer = listed(tools)
    assert answer["resolved_path"] == "."
    assert (answer["truncated"], answer["unnamed_entries"]) == (False, 0)
    names = [entry["name"] for entry in answer["entries"]]
    # Every entry the fixture made (an unprivileged build cannot make the device node).
    assert names == sorted(os.listdir(tree.root))
    assert set(names) <= set(TYPES)
    for entry in answer["entries"]:
        assert entry["type"] == TYPES[entry["name"]], entry
        status = os.lstat(tree.root / entry["name"])
        if entry["type"] == "file":
            assert entry["size"] == status.st_size
        else:
            assert entry["size"] is None
        moment = datetime.fromisoformat(entry["modified"])
        assert moment.tzinfo == UTC
        assert int(moment.timestamp() * 1_000_000) == status.st_mtime_ns // 1000


def test_no_outside_name_or_target_appears(tools: FileTools, tree: FSTree) -> None:
    text = str(listed(tools))
    for outside in (str(tree.outside), str(tree.evil), "secret", "/dev/zero", "/proc"):
        assert outside not in text


@pytest.mark.parametrize(
    ("path", "resolved", "names"),
    [
        ("sub", "sub", ["deeper", "inner.txt"]),
        ("link_in_dir", "sub", ["deeper", "inner.txt"]),
        ("sub/deeper/..", "sub", ["deeper", "inner.txt"]),
        ("sub/deeper", "sub/deeper", ["d.txt"]),
        ("dir_only", "dir_only", []),
        ("{ROOT}/sub", "sub", ["deeper", "inner.txt"]),
        (".", ".", None),
        ("./", ".", None),
    ],
)
def test_directories_beneath_the_root(
    tools: FileTools, tree: FSTree, path: str, resolved: str, names: list[str] | None
) -> None:
    answer = listed(tools, relative_path=tree.expand(path))
    assert answer["resolved_path"] == resolved
    expected = sorted(os.listdir(tree.root)) if names is None else names
    assert [entry["name"] for entry in answer["entries"]] == expected


@pytest.mark.parametrize(
    ("path", "code", "phrase"),
    [
        ("..", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("../outside", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("../root", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("link_dir_out", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("link_evil", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("proc_root", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("{BASE}/outside", MCPErrorCode.ACCESS_DENIED, OUTSIDE),
        ("loop_a", MCPErrorCode.ACCESS_DENIED, "meets more than 40 symbolic links"),
        ("missing", MCPErrorCode.VALIDATION_ERROR, "does not exist"),
        ("ok.txt", MCPErrorCode.VALIDATION_ERROR, "names a file, not a directory"),
        ("fifo", MCPErrorCode.VALIDATION_ERROR, "names a file, not a directory"),
        ("ok.txt/", MCPErrorCode.VALIDATION_ERROR, "has a component that is not a directory"),
    ],
)
def test_what_is_not_a_directory_beneath_the_root(
    tools: FileTools, tree: FSTree, path: str, code: MCPErrorCode, phrase: str
) -> None:
    answer = call(tools.list, {"relative_path": tree.expand(path)})
    assert isinstance(answer, Problem), answer
    assert answer.code is code
    assert phrase in answer.detail
    assert str(tree.base) not in answer.as_text()


def tools_root(tools: FileTools) -> str:
    return tools.reader._root.path


def test_at_most_max_entries_are_listed_the_first_scanned_sorted(tools: FileTools) -> None:
    # The scan stops after max_entries + 1 names: the listing is the first names the file
    # system returns, sorted, not the smallest names of the directory.
    answer = listed(tools, max_entries=3)
    scanned = [entry.name for entry in os.scandir(tools_root(tools))]
    assert [entry["name"] for entry in answer["entries"]] == sorted(scanned[:3])
    assert answer["truncated"] is True
    exact = listed(tools, max_entries=len(scanned))
    assert exact["truncated"] is False
    assert [entry["name"] for entry in exact["entries"]] == sorted(scanned)


def test_max_entries_stops_the_scan(
    scratch: tuple[FileTools, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On main, one entry cost the scan of the whole directory (up to 100,000 entries).
    tools, directory = scratch
    for index in range(50):
        (directory / f"f{index:02d}").write_bytes(b"")
    seen: list[str] = []
    real = listing._Scan.names

    def counted(self: Any, scanned: Any, wanted: int) -> list[str]:
        def spy() -> Any:
            for entry in scanned:
                seen.append(entry.name)
                yield entry

        found: list[str] = real(self, spy(), wanted)
        return found

    monkeypatch.setattr(listing._Scan, "names", counted)
    answer = listed(tools, max_entries=1)
    assert len(answer["entries"]) == 1
    assert answer["truncated"] is True
    assert len(seen) == 2


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_entries": 0},
        {"max_entries": MAX_MAX_ENTRIES + 1},
        {"max_entries": True},
        {"relative_path": ""},
        {"relative_path": "a\x00b"},
        {"extra": 1},
    ],
)
def test_the_argument_model_refuses(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SandboxFSListParams.model_validate(arguments)


@pytest.fixture
def scratch(tmp_path: Path, mode: str) -> Iterator[tuple[FileTools, Path]]:
    with file_tools(tmp_path, mode) as built:
        yield built, tmp_path


def test_names_that_are_not_utf8_are_counted_not_listed(scratch: tuple[FileTools, Path]) -> None:
    tools, directory = scratch
    (directory / os.fsdecode(b"lat\xe9.txt")).write_bytes(b"x")
    (directory / os.fsdecode(b"\xff\xfe")).mkdir()
    (directory / "fine.txt").write_bytes(b"x")
    answer = listed(tools)
    assert [entry["name"] for entry in answer["entries"]] == ["fine.txt"]
    assert answer["unnamed_entries"] == 2


def test_a_huge_directory_is_listed_from_the_first_entries_scanned(
    scratch: tuple[FileTools, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "MAX_SCANNED_ENTRIES", 5)
    tools, directory = scratch
    for index in range(8):
        (directory / f"f{index}").write_bytes(b"")
    answer = listed(tools)
    assert len(answer["entries"]) == 5
    assert answer["truncated"] is True


def test_an_entry_gone_since_the_scan_is_other_without_details(
    scratch: tuple[FileTools, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tools, directory = scratch
    (directory / "here.txt").write_bytes(b"x")
    (directory / "gone.txt").write_bytes(b"x")
    real = listing._Scan.names

    def then_remove(self: Any, scanned: Any, wanted: int) -> list[str]:
        chosen: list[str] = real(self, scanned, wanted)
        (directory / "gone.txt").unlink()
        return chosen

    monkeypatch.setattr(listing._Scan, "names", then_remove)
    entries = {entry["name"]: entry for entry in listed(tools)["entries"]}
    assert entries["gone.txt"] == {
        "name": "gone.txt",
        "type": "other",
        "size": None,
        "modified": None,
    }
    assert entries["here.txt"]["type"] == "file"


@pytest.mark.root
def test_an_unreadable_directory_is_refused_as_nobody(tmp_path: Path, mode: str) -> None:
    (tmp_path / "closed").mkdir(mode=0o711)
    (tmp_path / "open").mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)  # noqa: S103 - the unprivileged child must traverse the root
    with file_tools(tmp_path, mode) as tools:

        def outcomes() -> list[str]:
            found = []
            for path in ("closed", "open"):
                answer = call(tools.list, {"relative_path": path})
                found.append(answer.detail if isinstance(answer, Problem) else "listed")
            return found

        assert as_nobody(outcomes) == ["'closed' cannot be read: permission denied", "listed"]


def test_the_largest_listing_fits_the_response_bound(tmp_path: Path) -> None:
    # 1,000 entries named with 255 bytes of characters outside the BMP, each escaped as a
    # surrogate pair in both copies: the worst a listing of a local file system can hold.
    for index in range(MAX_MAX_ENTRIES):
        name = f"{index:03d}" + "\U0001f600" * 63
        (tmp_path / name).write_bytes(b"")
    with file_tools(tmp_path, "kernel") as tools:
        output = asyncio.run(
            Guardrails(limiter=ConcurrencyLimiter()).invoke(
                tools.list, {"max_entries": MAX_MAX_ENTRIES}
            )
        )
    assert len(output.structured["entries"]) == MAX_MAX_ENTRIES
    assert response_bytes(output.structured, output.text) <= MAX_RESPONSE_BYTES


def test_names_too_long_for_any_local_file_system_stay_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FUSE passes names of up to 1,024 bytes (on main, one of 300 characters broke the
    # listing's contract: -32603). Entries of 1,024 characters outside the BMP would make a
    # response of 24 MiB; the listing stops before the bound, and says it is cut short.
    class Entry:
        def __init__(self, name: str) -> None:
            self.name = name

    long_names = [f"{index:03d}" + "\U0001f600" * 1021 for index in range(MAX_MAX_ENTRIES)]
    too_long = "x" * (MAX_NAME_CHARS + 1)

    class Scanned:
        def __enter__(self) -> Any:
            return iter([Entry(name) for name in (too_long, *long_names)])

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(os, "scandir", lambda fd: Scanned())
    with file_tools(tmp_path, "kernel") as tools:
        output = asyncio.run(
            Guardrails(limiter=ConcurrencyLimiter()).invoke(
                tools.list, {"max_entries": MAX_MAX_ENTRIES}
            )
        )
    entries = output.structured["entries"]
    assert 0 < len(entries) < MAX_MAX_ENTRIES
    assert output.structured["truncated"] is True
    assert output.structured["unnamed_entries"] == 1
    assert {entry["type"] for entry in entries} == {"other"}
    assert response_bytes(output.structured, output.text) <= MAX_RESPONSE_BYTES


def test_a_budget_spent_reaching_the_directory_cuts_the_listing(
    scratch: tuple[FileTools, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The links of a/b are resolved from a/b, reached again by name: two opens, one too many.
    tools, directory = scratch
    (directory / "a" / "b").mkdir(parents=True)
    (directory / "a" / "b" / "f").write_bytes(b"x")
    (directory / "a" / "b" / "l").symlink_to("f")
    monkeypatch.setattr(listing, "LINK_STEPS", 1)
    answer = listed(tools, relative_path="a/b")
    assert [entry["name"] for entry in answer["entries"]] == ["f"]
    assert answer["truncated"] is True
