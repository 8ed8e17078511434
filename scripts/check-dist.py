#!/usr/bin/env python3
"""Check the built distributions before they are published: contents, metadata, and a server
installed from the wheel into a fresh virtual environment that answers a session.

Run by the release workflow on `dist/` after `uv build`, and by tests/e2e/test_release.py on a
build of its own. Checks, in order:

1. `dist/` holds exactly one sdist and one wheel, named for the version in pyproject.toml (and
   for `--tag`, which must be `v<version>`).
2. The wheel holds the package with its data (the tool catalog, `py.typed`), the
   `mcp-server-suite` console script and the metadata (name, version, Python requirement,
   licence, the `binary` extra), and no tests; the sdist holds what building it again needs.
3. A fresh virtual environment gets the wheel and its dependencies (from the package index, as
   a user's `pip install` would; with `--offline`, as uv.lock pins them, from uv's cache), and
   `uv pip check` finds them consistent.
4. The installed `mcp-server-suite` prints its version, passes `--check-config`, and answers
   a session: the handshake, the tool list, a file read and a metrics reading.

Standard library only, and uv. Prints one line per check; exits 1 at the first that fails.

Usage: scripts/check-dist.py [--tag vX.Y.Z] [--offline] DIST_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGE: Final = "mcp_server_suite"
DISTRIBUTION: Final = "mcp-server-suite"

# Files the installed server cannot run without, beyond its modules.
WHEEL_DATA: Final = (f"{PACKAGE}/tools/catalog.json", f"{PACKAGE}/py.typed")
SDIST_FILES: Final = ("pyproject.toml", "README.md", "LICENSE", f"src/{PACKAGE}/__init__.py")

# A cold start of a fresh environment on a loaded machine stays far below this.
COMMAND_TIMEOUT_S: Final = 300


class CheckFailed(Exception):
    """A check failed; the message says which and why."""


def project_version() -> str:
    with (REPO_ROOT / "pyproject.toml").open("rb") as handle:
        version: str = tomllib.load(handle)["project"]["version"]
    return version


def find_distributions(dist: Path, version: str) -> tuple[Path, Path]:
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    expected_wheel = f"{PACKAGE}-{version}-py3-none-any.whl"
    expected_sdist = f"{PACKAGE}-{version}.tar.gz"
    if [path.name for path in wheels] != [expected_wheel]:
        raise CheckFailed(f"{dist} should hold one wheel, {expected_wheel}: {wheels}")
    if [path.name for path in sdists] != [expected_sdist]:
        raise CheckFailed(f"{dist} should hold one sdist, {expected_sdist}: {sdists}")
    return wheels[0], sdists[0]


def check_wheel(wheel: Path, version: str) -> None:
    info = f"{PACKAGE}-{version}.dist-info"
    required = (
        f"{PACKAGE}/__main__.py",
        *WHEEL_DATA,
        f"{info}/METADATA",
        f"{info}/entry_points.txt",
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [name for name in required if name not in names]
        if missing:
            raise CheckFailed(f"the wheel lacks {missing}")
        metadata = HeaderParser().parsestr(archive.read(f"{info}/METADATA").decode("utf-8"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode("utf-8")
    strays = sorted(name for name in names if not name.startswith((f"{PACKAGE}/", info)))
    if strays:
        raise CheckFailed(f"the wheel holds files outside the package: {strays[:5]}")
    expected = {
        "Name": DISTRIBUTION,
        "Version": version,
        "Requires-Python": ">=3.11",
        "License-Expression": "MIT",
    }
    wrong = {
        key: metadata.get(key) for key, value in expected.items() if metadata.get(key) != value
    }
    if wrong:
        raise CheckFailed(f"the wheel's metadata differs from {expected}: {wrong}")
    if "binary" not in (metadata.get_all("Provides-Extra") or []):
        raise CheckFailed("the wheel's metadata lacks the binary extra")
    if f"{DISTRIBUTION} = {PACKAGE}.__main__:main" not in entry_points:
        raise CheckFailed(f"the wheel has no {DISTRIBUTION} console script")


def check_sdist(sdist: Path, version: str) -> None:
    top = f"{PACKAGE}-{version}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    missing = [name for name in SDIST_FILES if f"{top}/{name}" not in names]
    if missing:
        raise CheckFailed(f"the sdist lacks {missing}")


def run(command: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: str = "") -> str:
    done = subprocess.run(
        list(command),
        input=stdin,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def install(wheel: Path, venv: Path, *, offline: bool) -> None:
    python = str(venv / "bin" / "python")
    run(["uv", "venv", "--quiet", str(venv)])
    if offline:
        # The dependencies as the lock pins them, from uv's cache; the wheel without its own
        # resolution, which `uv pip check` then confirms.
        env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
        run(
            [
                "uv", "sync", "--quiet", "--locked", "--offline", "--no-dev", "--extra", "binary",
                "--no-install-project", "--project", str(REPO_ROOT),
            ],
            env=env,
        )  # fmt: skip
        run(["uv", "pip", "install", "--quiet", "--offline", "--no-deps", "--python", python,
             str(wheel)])  # fmt: skip
    else:
        run(["uv", "pip", "install", "--quiet", "--python", python, f"{wheel}[binary]"])
    run(["uv", "pip", "check", "--quiet", "--python", python])


def session(server: Path, data: Path) -> list[dict[str, Any]]:
    client = {"name": "check-dist", "version": "1"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}

    def call(request_id: int, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": dict(arguments)}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        call(3, "sandbox_fs_read", {"relative_path": "hello.txt"}),
        call(4, "system_metrics", {}),
    ]
    env = {"PATH": "/usr/bin:/bin", "MCP_SAFE_DATA_DIR": str(data), "MCP_AUDIT_LOG": "off"}
    out = run([str(server)], env=env, stdin="".join(json.dumps(m) + "\n" for m in messages))
    responses = sorted(map(json.loads, out.splitlines()), key=lambda response: response["id"])
    if [response.get("id") for response in responses] != [1, 2, 3, 4]:
        raise CheckFailed(f"the installed server's session went wrong: {out}")
    for response in responses[2:]:
        if response.get("result", {}).get("isError") is not False:
            raise CheckFailed(f"a call to the installed server failed: {response}")
    return responses


def check(dist: Path, tag: str | None, *, offline: bool) -> None:
    version = project_version()
    if tag is not None and tag != f"v{version}":
        raise CheckFailed(f"the tag {tag} does not name version {version} (pyproject.toml)")
    wheel, sdist = find_distributions(dist, version)
    print(f"ok: {wheel.name} and {sdist.name} for version {version}")
    check_wheel(wheel, version)
    check_sdist(sdist, version)
    print("ok: the wheel and the sdist hold the package, its data and its metadata")
    with tempfile.TemporaryDirectory(prefix="check-dist-") as scratch:
        venv = Path(scratch) / "venv"
        install(wheel, venv, offline=offline)
        print(f"ok: installed into a fresh virtual environment ({'lock' if offline else 'index'})")
        server = venv / "bin" / DISTRIBUTION
        shown = run([str(server), "--version"]).strip()
        if shown != f"{DISTRIBUTION} {version}":
            raise CheckFailed(f"the installed server says {shown!r}")
        run([str(server), "--check-config"], env={"PATH": "/usr/bin:/bin"})
        data = Path(scratch) / "data"
        data.mkdir()
        (data / "hello.txt").write_text("hello from the wheel\n", encoding="utf-8")
        responses = session(server, data)
        tools = [tool["name"] for tool in responses[1]["result"]["tools"]]
        print(f"ok: {shown} answers a session from the fresh environment (tools: {tools})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("dist", type=Path, help="the directory uv build wrote")
    parser.add_argument("--tag", help="the release tag, which must be v<version>")
    parser.add_argument("--offline", action="store_true", help="dependencies from the lock")
    options = parser.parse_args(argv)
    try:
        check(options.dist, options.tag, offline=options.offline)
    except CheckFailed as exc:
        print(f"check-dist: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
