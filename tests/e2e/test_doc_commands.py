"""Every shell block the documentation marks `doc-test` runs as a reader would run it.

A block preceded by `<!-- doc-test: NAME -->` belongs to the scenario NAME
(docs/development/documentation.md). The blocks of a scenario run in the order they are
written, in one bash process (`set -euo pipefail`), as a reader pastes them into one shell:
a `cd` or an `export` of one block holds for the next. Each scenario gets a temporary home
directory, a short `PATH`, and what its blocks assume exists: a clone, a PostgreSQL server with
the database the text describes. Placeholders a reader replaces (`PLACEHOLDERS`) are replaced
with real values, and nothing else of a block is changed. After the run, the scenario checks
what the blocks were meant to do.

Nothing reaches the network: the clone is made from this repository (what is committed, as a
reader's clone would hold), and uv installs offline from the cache the suite's own `uv sync`
filled, as tests/e2e/test_release.py does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from tests.support.doc_blocks import Block, shell_blocks
from tests.support.harness import REPO_ROOT
from tests.support.postgres import SUPERUSER, PostgresServer, throwaway_postgres

BLOCKS: Final = [block for block in shell_blocks() if block.marker == "doc-test"]

# What a reader replaces, and with what here. The clone's URL is the repository's address on
# its host; the DSN's password and host are the reader's own.
CLONE_URL: Final = "https://git.example.org/mcp-server-suite.git"
PASSWORD: Final = "<password>"  # noqa: S105  # The documentation's placeholder, not a secret.
DATABASE_HOST: Final = "db.example.internal:5432"

# A password for the throwaway server, which trusts its socket: the DSN carries one as a
# reader's does, and its percent-encoding is exercised.
TEST_PASSWORD: Final = "p@ss:w/rd%"  # noqa: S105  # hygiene: allow-secret-fixture

# A clone, an offline `uv sync` into a fresh environment and a session; `uv build` adds a
# build environment. Generous for a loaded CI machine.
SCENARIO_TIMEOUT_S: Final = 600

# Where a block's output starts, on stdout and on stderr, so a failure names its block.
_SEPARATOR: Final = "::doc-test block {}::"


@dataclass
class Context:
    """What a scenario's blocks run in, and what its checks look at."""

    home: Path
    workdir: Path
    env: dict[str, str]
    substitutions: dict[str, str] = field(default_factory=dict)
    server: PostgresServer | None = None


@dataclass(frozen=True)
class Run:
    """The output of each block of a scenario, in order."""

    stdout: list[str]
    stderr: list[str]


@dataclass(frozen=True)
class Scenario:
    """How to prepare for a scenario's blocks, and what they must have done.

    Attributes:
        needs: `clone` (the blocks run in a fresh clone), `clone-parent` (they make the clone
            themselves), `repository` (they run at the top of this repository, whose
            `.cache/venv` scripts/test.sh built), and `postgres` with any of them.
        prepare: Makes what the text says exists before the first block.
        check: Asserts what the blocks were meant to do.
    """

    needs: frozenset[str]
    prepare: Callable[[Context], None]
    check: Callable[[Context, Run], None]


# --- the scenarios --------------------------------------------------------------------------


def _nothing(context: Context) -> None:
    del context


def _check_quickstart(context: Context, run: Run) -> None:
    (output,) = run.stdout
    clone = context.workdir / "mcp-server-suite"
    assert "mcp-server-suite 0.1.0 answered 5 requests over stdio" in output
    assert "path traversal   ../../etc/passwd refused in-band with MCP_ACCESS_DENIED" in output
    configuration = json.loads(output[output.index('{\n  "mcpServers"') :])
    command = configuration["mcpServers"]["mcp-server-suite"]["command"]
    assert command == str(clone / ".cache" / "venv" / "bin" / "mcp-server-suite")


def _check_session(context: Context, run: Run) -> None:
    del context
    (output,) = run.stdout
    responses = [json.loads(line) for line in output.splitlines()]
    assert [response["id"] for response in responses] == [1, 2, 3, 4]
    assert all("result" in response for response in responses), responses
    read = responses[2]["result"]
    assert read["isError"] is False
    assert read["structuredContent"]["content"].startswith("Hello from the sandbox.")
    assert responses[3]["result"]["isError"] is False


def _check_install(context: Context, run: Run) -> None:
    version, _build = run.stdout
    assert version.strip() == "mcp-server-suite 0.1.0"
    built = (context.workdir / "dist").iterdir()
    assert sorted(path.name for path in built if path.suffix in {".whl", ".gz"}) == [
        "mcp_server_suite-0.1.0-py3-none-any.whl",
        "mcp_server_suite-0.1.0.tar.gz",
    ]


def _prepare_database(context: Context, *, own_function: bool = False) -> None:
    """The README's assumption: a database `app` whose schema `reporting` `app_owner` owns,
    with a table in it (and, with `own_function`, a function of the application's), and
    files of the reader's in ~/notes."""
    server = context.server
    assert server is not None
    with psycopg.connect(
        f"postgresql://{SUPERUSER}@/postgres?host={server.socket_dir}", autocommit=True
    ) as conn:
        conn.execute("DROP DATABASE IF EXISTS app")
        conn.execute("CREATE DATABASE app")
        if conn.execute("SELECT FROM pg_roles WHERE rolname = 'app_owner'").fetchone() is None:
            conn.execute("CREATE ROLE app_owner NOLOGIN")
    with server.connect() as conn:
        conn.execute("CREATE SCHEMA reporting AUTHORIZATION app_owner")
        conn.execute("SET ROLE app_owner")
        conn.execute("CREATE TABLE reporting.sales (region text, amount numeric)")
        conn.execute("INSERT INTO reporting.sales VALUES ('north', 10), ('south', 32)")
    if own_function:
        with server.connect() as conn:
            conn.execute("SET ROLE app_owner")
            # Code of the application's own, which the reader must not be able to run.
            conn.execute(
                "CREATE FUNCTION reporting.discount(numeric) RETURNS numeric "
                "LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 0.9'"
            )
    notes = context.home / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("# To do\n\n- Read the sales figures.\n", encoding="utf-8")
    context.substitutions[PASSWORD] = urllib.parse.quote(TEST_PASSWORD, safe="")
    socket_dir = urllib.parse.quote(str(server.socket_dir), safe="")
    context.substitutions[DATABASE_HOST] = f"{socket_dir}:5432"


def _reader_may_execute(server: PostgresServer, function: str) -> bool:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT has_function_privilege('mcp_reader', %s, 'EXECUTE')", [function]
        ).fetchone()
    assert row is not None
    return bool(row[0])


def _check_your_data(context: Context, run: Run) -> None:
    assert context.server is not None
    copied = context.home / "mcp-data" / "notes" / "todo.md"
    assert copied.read_text(encoding="utf-8").startswith("# To do")
    dsn_file = context.home / ".config" / "mcp-server-suite" / "dsn"
    assert dsn_file.stat().st_mode & 0o777 == 0o600
    assert TEST_PASSWORD not in "".join(run.stdout + run.stderr)
    check = run.stdout[-1]
    assert "read_only_sql" in check
    assert "sandbox_fs_read" in check
    # The step's promise: the three variables make a working server. A session with them
    # reads the copied file and the table through the reader role.
    environment = {
        "PATH": "/usr/bin:/bin",
        "MCP_SAFE_DATA_DIR": str(context.home / "mcp-data"),
        "MCP_SQL_DSN_FILE": str(dsn_file),
        "MCP_SQL_SCHEMAS": "reporting",
        "MCP_AUDIT_LOG": "off",
    }
    responses = session(
        environment,
        ("sandbox_fs_read", {"relative_path": "notes/todo.md"}),
        ("read_only_sql", {"query": "SELECT sum(amount) AS total FROM sales"}),
    )
    read, query = (response["result"] for response in responses)
    assert read["structuredContent"]["content"].startswith("# To do"), read
    assert query["structuredContent"]["rows"] == [["42"]], query


def _check_role_options(context: Context, run: Run) -> None:
    del run
    assert context.server is not None
    # The option's promise: code of the application's own is no longer the reader's to run.
    assert not _reader_may_execute(context.server, "reporting.discount(numeric)")
    dsn = f"postgresql://mcp_reader@/app?host={context.server.socket_dir}"
    done = subprocess.run(
        [str(REPO_ROOT / ".cache" / "venv" / "bin" / "mcp-server-suite"), "--check-config"],
        env={"PATH": "/usr/bin:/bin", "MCP_SQL_DSN": dsn, "MCP_SQL_SCHEMAS": "reporting"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _prepare_role_options(context: Context) -> None:
    _prepare_database(context, own_function=True)
    assert context.server is not None
    # Without the option, PUBLIC (and so the reader) may run the application's function.
    assert _reader_may_execute(context.server, "reporting.discount(numeric)")


SCENARIOS: Final = {
    "quickstart": Scenario(frozenset({"clone-parent"}), _nothing, _check_quickstart),
    "session": Scenario(frozenset({"repository"}), _nothing, _check_session),
    "install": Scenario(frozenset({"clone"}), _nothing, _check_install),
    "your-data": Scenario(
        frozenset({"repository", "postgres"}), _prepare_database, _check_your_data
    ),
    "role-options": Scenario(
        frozenset({"repository", "postgres"}), _prepare_role_options, _check_role_options
    ),
}


# --- running them ---------------------------------------------------------------------------


def session(environment: Mapping[str, str], *calls: tuple[str, object]) -> list[dict[str, Any]]:
    """Hold a session with the clone's server; return the response of each call, in order."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "doc-test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ] + [
        {
            "jsonrpc": "2.0",
            "id": number,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        for number, (name, arguments) in enumerate(calls, start=1)
    ]
    done = subprocess.run(
        [str(REPO_ROOT / ".cache" / "venv" / "bin" / "mcp-server-suite")],
        input="".join(json.dumps(message) + "\n" for message in messages),
        env=dict(environment),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    responses = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {response["id"]: response for response in responses}
    return [by_id[number] for number in range(1, len(calls) + 1)]


def scenario_names() -> list[str]:
    return list(dict.fromkeys(block.marker_value for block in BLOCKS))


def scenario_blocks(name: str) -> list[Block]:
    return [block for block in BLOCKS if block.marker_value == name]


def substitute(text: str, substitutions: Mapping[str, str]) -> str:
    for placeholder, real in substitutions.items():
        text = text.replace(placeholder, real)
    return text


def script(blocks: list[Block], substitutions: Mapping[str, str]) -> str:
    """One bash script of the blocks, each announced on both streams."""
    parts = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        marker = _SEPARATOR.format(number)
        parts.append(f"echo '{marker}'; echo '{marker}' >&2")
        parts.append(substitute(block.text, substitutions))
    return "\n".join(parts) + "\n"


def split(output: str, count: int) -> list[str]:
    pieces = []
    for number in range(count):
        marker = _SEPARATOR.format(number) + "\n"
        start = output.index(marker) + len(marker)
        following = _SEPARATOR.format(number + 1)
        end = output.find(following, start)
        pieces.append(output[start : end if end != -1 else None])
    return pieces


def uv_cache() -> str:
    """The cache the suite's own `uv sync` filled, which offline installs read."""
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH: run the suite with scripts/test.sh"
    done = subprocess.run(
        [uv, "cache", "dir"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    # uv prints the pyproject's `cache-dir` as written, relative to the repository; the
    # scenarios run elsewhere.
    return str(REPO_ROOT / done.stdout.strip())


def clone_of_this_repository(where: Path) -> Path:
    """A bare copy of this repository, to clone as a reader clones the published one."""
    remote = where / "remote" / "mcp-server-suite.git"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(REPO_ROOT), str(remote)],
        check=True,
        timeout=120,
    )
    return remote


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PostgresServer]:
    """A throwaway server of this module's own: the role script changes cluster-wide roles and
    a database's grants, which the suite's shared server must keep."""
    with throwaway_postgres(log_statements=False) as server:
        yield server


# --- the convention, whatever this run launches ---------------------------------------------


def test_every_doc_test_block_belongs_to_a_scenario_and_every_scenario_has_blocks() -> None:
    assert sorted(scenario_names()) == sorted(SCENARIOS)


def test_the_scenarios_blocks_are_where_the_text_puts_them() -> None:
    # The quickstart and the four steps are the README's; their order is the reader's.
    assert [block.path for block in scenario_blocks("quickstart")] == ["README.md"]
    assert [block.path for block in scenario_blocks("your-data")] == ["README.md"] * 4
    for block in scenario_blocks("your-data"):
        assert block.heading == "Point it at your data"


def test_a_failing_block_names_itself(tmp_path: Path) -> None:
    blocks = [
        Block("a.md", 1, "bash", "h", "doc-test", "x", "echo one\n"),
        Block("a.md", 5, "bash", "h", "doc-test", "x", "false\necho never\n"),
    ]
    done = subprocess.run(
        ["bash", "-c", script(blocks, {})], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert split(done.stdout, 2) == ["one\n", ""]


# --- running the scenarios ------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_scenario_runs_as_written(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    scenario = SCENARIOS[name]
    blocks = scenario_blocks(name)
    assert blocks, f"no block of the documentation is in the scenario {name}"
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "tmp").mkdir()
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH: run the suite with scripts/test.sh"
    path = [str(Path(uv).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path / "tmp"),
        # Offline, from the suite's cache, with the interpreter the suite runs on.
        "UV_CACHE_DIR": uv_cache(),
        "UV_OFFLINE": "1",
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }
    context = Context(home=home, workdir=REPO_ROOT, env=env)
    if "clone-parent" in scenario.needs or "clone" in scenario.needs:
        remote = clone_of_this_repository(tmp_path)
        context.substitutions[CLONE_URL] = str(remote)
        context.workdir = tmp_path / "work"
        context.workdir.mkdir()
        if "clone" in scenario.needs:
            subprocess.run(
                ["git", "clone", "--quiet", str(remote), "mcp-server-suite"],
                cwd=context.workdir,
                check=True,
                timeout=120,
            )
            context.workdir = context.workdir / "mcp-server-suite"
    if "repository" in scenario.needs:
        server = REPO_ROOT / ".cache" / "venv" / "bin" / "mcp-server-suite"
        assert server.exists(), f"{server} is missing: run the suite with scripts/test.sh"
    if "postgres" in scenario.needs:
        context.server = request.getfixturevalue("private_postgres")
        path.insert(0, str(context.server.bindir))
        env.update({"PGHOST": str(context.server.socket_dir), "PGUSER": SUPERUSER})
    env["PATH"] = os.pathsep.join(path)
    scenario.prepare(context)
    done = subprocess.run(
        ["bash", "-c", script(blocks, context.substitutions)],
        cwd=context.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"scenario {name} ({', '.join(block.where for block in blocks)}) failed:\n"
        f"{done.stdout}\n{done.stderr}"
    )
    run = Run(split(done.stdout, len(blocks)), split(done.stderr, len(blocks)))
    scenario.check(context, run)
