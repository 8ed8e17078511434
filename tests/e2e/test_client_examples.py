"""Every client configuration of the documentation works as pasted, once its paths are real.

Each `mcpServers` (or VS Code `servers`) block is read out of README.md and docs/
(tests/support/client_examples.py), its example paths replaced, and launched with the
official Python SDK's `stdio_client` and
`ClientSession` exactly as a client would: the configuration's command, args and env, the
SDK's own inherited variables on a short `PATH` and a working directory that is not the
clone. The session lists the tools and calls every one offered.

Which kinds run is `--client-examples` (default: the clone and socket blocks); the
container-security job runs the `nix` and `docker` blocks, the release workflow the `release`
block. The SDK is imported inside the launcher, so collection never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_examples import (
    KINDS,
    PLACEHOLDERS,
    ClientExample,
    classify,
    document_examples,
    documentation_examples,
    selected_kinds,
    substitute,
)
from tests.support.doc_blocks import documents
from tests.support.harness import REPO_ROOT, base_environment
from tests.support.postgres import PostgresServer

EXAMPLES = documentation_examples(documents(REPO_ROOT), REPO_ROOT)

# The members an entry may have: what the SDK's launcher reads, and VS Code's transport.
ENTRY_MEMBERS = frozenset({"command", "args", "env", "type"})

# A desktop client's PATH: the system directories and nothing of the user's.
CLIENT_PATH = "/usr/bin:/bin"

# The SDK's handshake, a tool list and three calls; `nix run` may first build the package.
SESSION_TIMEOUT_S = {"nix": 900.0, "docker": 300.0, "release": 300.0}
DEFAULT_SESSION_TIMEOUT_S = 60.0

HELLO = "Hello from the client example.\n"
CALLS: Mapping[str, Mapping[str, Any]] = {
    "system_metrics": {"include_disk": True},
    "sandbox_fs_read": {"relative_path": "hello.txt"},
    "read_only_sql": {"query": "SELECT 1 AS one"},
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "example" in metafunc.fixturenames:
        kinds = selected_kinds(metafunc.config)
        chosen = [example for example in EXAMPLES if example.kind in kinds]
        if not chosen:
            # An empty parameter set would be a skip; a selection that runs nothing is wrong.
            raise pytest.UsageError(f"the documentation shows no client configuration of {kinds}")
        metafunc.parametrize("example", chosen, ids=[example.id for example in chosen])


# --- the documentation's blocks, whatever this run launches ---------------------------------


def test_every_block_is_classified_and_every_kind_is_shown() -> None:
    assert {example.kind for example in EXAMPLES} == set(KINDS)
    assert [example.name for example in EXAMPLES] == ["mcp-server-suite"] * len(EXAMPLES)
    for example in EXAMPLES:
        assert set(example.server) <= ENTRY_MEMBERS, example
    # The README shows the configuration from a clone first, for both keys.
    readme = [example for example in EXAMPLES if example.document == "README.md"]
    assert [(example.key, example.kind) for example in readme] == [
        ("mcpServers", "clone"),
        ("servers", "clone"),
    ]


def test_vs_code_entries_name_their_transport_and_the_others_do_not() -> None:
    # VS Code requires `type` on every entry; the other clients take stdio as the default,
    # and Claude Desktop's documentation shows no `type`.
    for example in EXAMPLES:
        if example.key == "servers":
            assert example.server.get("type") == "stdio", example
        else:
            assert "type" not in example.server, example


def test_every_block_uses_only_the_documented_example_paths() -> None:
    # A host path a user must change is one of the placeholders; anything else absolute is a
    # path inside the container, or a mount specification built from a placeholder.
    container_paths = ("/safe_data_dir", "/tmp:")
    for example in EXAMPLES:
        for text in _strings(example.server):
            for word in text.split():
                if word.startswith("/") and not word.startswith(PLACEHOLDERS + container_paths):
                    raise AssertionError(f"{example.id}: undocumented path {word!r}")


def test_a_block_with_an_unknown_command_is_refused() -> None:
    with pytest.raises(ValueError, match="no launcher"):
        classify({"command": "npx"})


def test_every_json_block_naming_mcp_servers_is_one_document(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text('# T\n\n```json\n{"mcpServers": {"a": {"command": "uvx"}}}\n{}\n```\n')
    with pytest.raises(ValueError, match="Extra data"):
        document_examples(readme, tmp_path)


def test_a_block_with_both_keys_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('# T\n\n```json\n{"mcpServers": {}, "servers": {}}\n```\n')
    with pytest.raises(ValueError, match="keys"):
        document_examples(page, tmp_path)


def test_vs_code_blocks_are_found_under_their_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '# T\n\n## VS Code\n\n```json\n{"servers": {"a": {"type": "stdio", "command": "uvx"}}}'
        '\n```\n\n```json\n{"other": 1}\n```\n'
    )
    (example,) = document_examples(page, tmp_path)
    assert (example.document, example.heading, example.key, example.kind) == (
        "page.md",
        "VS Code",
        "servers",
        "release",
    )


def test_unknown_kinds_are_a_usage_error() -> None:
    class Config:
        def __init__(self, value: str) -> None:
            self.value = value

        def getoption(self, name: str) -> str:
            assert name == "client_examples"
            return self.value

    assert selected_kinds(Config(" nix, docker")) == ["nix", "docker"]  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match=r"unknown kind\(s\) \['kubernetes'\]"):
        selected_kinds(Config("clone,kubernetes"))  # type: ignore[arg-type]


# --- launching them ---------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.interop
@pytest.mark.postgres
def test_the_block_runs_as_pasted(
    example: ClientExample, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text(HELLO, encoding="utf-8")
    # The container's user (UID 10001) reads the bind-mounted directory.
    data.chmod(0o755)
    (data / "hello.txt").chmod(0o644)
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(postgres_server.dsn() + "\n", encoding="utf-8")
    with socket_unit(data) as socket_path:
        paths = {
            "/srv/mcp-server-suite": str(REPO_ROOT),
            "/srv/mcp-data": str(data),
            "/run/secrets/mcp-sql-dsn": str(dsn_file),
            "/run/mcp-server-suite/mcp.sock": str(socket_path),
        }
        server = substitute(dict(example.server), paths)
        if example.kind == "clone":
            assert Path(server["command"]).exists(), (
                f"{server['command']} is missing: run the suite from the environment "
                "scripts/test.sh builds (.cache/venv)"
            )
        tools, results = sdk_session(server, example.kind)
    assert "system_metrics" in tools
    if "MCP_SQL_DSN_FILE" in server.get("env", {}):
        assert "read_only_sql" in tools
    for name, result in results.items():
        assert result.is_error is False, (name, result.content)
    if "sandbox_fs_read" in results:
        assert results["sandbox_fs_read"].structured_content["content"] == HELLO
    if "read_only_sql" in results:
        assert results["read_only_sql"].structured_content["rows"] == [[1]]


def sdk_session(server: Mapping[str, Any], kind: str) -> tuple[list[str], dict[str, Any]]:
    """Launch one configuration with the SDK; return the tool names and each call's result."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parameters = StdioServerParameters(
        command=server["command"], args=list(server.get("args", [])), env=server.get("env")
    )

    async def session() -> tuple[list[str], dict[str, Any]]:
        with tempfile.TemporaryFile("w+") as errlog:
            try:
                async with (
                    stdio_client(parameters, errlog=errlog) as (read, write),
                    ClientSession(read, write) as client,
                ):
                    await client.initialize()
                    listed = await client.list_tools()
                    names = [tool.name for tool in listed.tools]
                    results = {
                        name: await client.call_tool(name, dict(CALLS[name]))
                        for name in names
                        if name in CALLS
                    }
            except Exception as exc:
                errlog.seek(0)
                raise AssertionError(
                    f"{kind} block failed; server stderr:\n{errlog.read()}"
                ) from exc
        return names, results

    timeout = SESSION_TIMEOUT_S.get(kind, DEFAULT_SESSION_TIMEOUT_S)
    with client_environment(server["command"]):
        return asyncio.run(asyncio.wait_for(session(), timeout=timeout))


@contextlib.contextmanager
def client_environment(command: str) -> Iterator[None]:
    """What a desktop client has: a short PATH (with the directory of a bare command, which
    the user's own PATH would hold) and a working directory outside the clone."""
    saved_path, saved_cwd = os.environ.get("PATH"), os.getcwd()
    path = CLIENT_PATH
    if os.sep not in command:
        found = shutil.which(command)
        assert found is not None, (
            f"{command} is not installed: {KINDS.get(classify({'command': command}))}"
        )
        path = f"{Path(found).parent}:{path}"
    os.environ["PATH"] = path
    with tempfile.TemporaryDirectory() as elsewhere:
        os.chdir(elsewhere)
        try:
            yield
        finally:
            os.chdir(saved_cwd)
            if saved_path is None:
                del os.environ["PATH"]
            else:
                os.environ["PATH"] = saved_path


@contextlib.contextmanager
def socket_unit(data: Path) -> Iterator[Path]:
    """systemd's socket activation with `Accept=yes`, as the NixOS module sets it up: a
    listening Unix socket, and for each connection one server with the connection as its
    stdin and stdout."""
    directory = Path(tempfile.mkdtemp(prefix="mcp-sock-"))
    path = directory / "mcp.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()
    children: list[subprocess.Popen[bytes]] = []
    env = base_environment({"MCP_SAFE_DATA_DIR": str(data)})

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                children.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "mcp_server_suite"],
                        stdin=connection.fileno(),
                        stdout=connection.fileno(),
                        stderr=subprocess.DEVNULL,
                        env=env,
                        cwd=REPO_ROOT,
                    )
                )

    thread = threading.Thread(target=accept_loop, name="socket-unit", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        listener.close()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
