"""The quickstart: its session and summary, and the stdlib-only uv bootstrap behind it.

`scripts/quickstart.sh` is `scripts/_uv.sh` (find or fetch uv), `uv sync` and
`scripts/quickstart-session.py`. The session script runs here against the server as the suite
runs it; the bootstrap runs with its downloads replaced by local bytes, because tests never
reach the network; tests/e2e/test_doc_commands.py runs the README's quickstart on a fresh clone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.harness import REPO_ROOT, base_environment

SCRIPTS = REPO_ROOT / "scripts"


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), SCRIPTS / name)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quickstart_session(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "quickstart-session.py"),
            *args,
            "--",
            sys.executable,
            "-m",
            "mcp_server_suite",
        ],
        env=base_environment(env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e
def test_the_session_is_summarised_in_plain_words() -> None:
    out = quickstart_session()
    lines = out.splitlines()
    assert lines[0].startswith("mcp-server-suite 0.1.0 answered 5 requests over stdio in ")
    assert lines[0].endswith("(protocol 2025-11-25):")
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and "  " in line[2:]}
    assert (
        "sandbox_fs_read, sandbox_fs_list, system_metrics (read_only_sql and sql_schema are off"
        in rows["tools"]
    )
    assert "% of 2 cores" in rows["system_metrics"] or "cores (load" in rows["system_metrics"]
    assert "disk" in rows["system_metrics"]
    assert "hello.txt (82 bytes): 'Hello from the sandbox." in rows["sandbox_fs_read"]
    assert (
        "../../etc/passwd refused in-band with MCP_ACCESS_DENIED: "
        "'../../etc/passwd' resolves outside the sandbox" in rows["path"]
    )
    assert "3 records on stderr, one per tools/call: ok, ok, MCP_ACCESS_DENIED" in rows["audit"]
    # Five responses, each cut to one line.
    assert len([line for line in lines if line.startswith("  < ")]) == 5
    configuration = json.loads(out[out.index('{\n  "mcpServers"') :])
    server = configuration["mcpServers"]["mcp-server-suite"]
    assert server["command"] == sys.executable
    assert server["args"] == ["-m", "mcp_server_suite"]
    assert server["env"] == {"MCP_SAFE_DATA_DIR": str(REPO_ROOT / "examples" / "data")}


@pytest.mark.e2e
def test_raw_shows_every_response_whole_and_the_trail_may_be_elsewhere(tmp_path: Path) -> None:
    out = quickstart_session("--raw", env={"MCP_AUDIT_LOG": "off"})
    responses = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("  < ")]
    assert sorted(response["id"] for response in responses) == [1, 2, 3, 4, 5]
    assert "no records on stderr (MCP_AUDIT_LOG sends them elsewhere, or is off)" in out


@pytest.mark.e2e
def test_a_failing_server_is_reported_with_its_stderr() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "quickstart-session.py"),
            "--",
            sys.executable,
            "-m",
            "mcp_server_suite",
        ],
        env=base_environment({"MCP_MAX_CONCURRENT_TOOLS": "0"}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "the server exited with status 78" in done.stderr
    assert "MCP_MAX_CONCURRENT_TOOLS" in done.stderr


# --- the uv bootstrap -----------------------------------------------------------------------


def fake_wheel(version: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for program in ("uv", "uvx"):
            archive.writestr(f"uv-{version}.data/scripts/{program}", f"#!{program}\n")
    return buffer.getvalue()


@pytest.fixture
def bootstrap(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, dict[str, bytes]]:
    module = load_script("bootstrap-uv.py")
    served: dict[str, bytes] = {}

    def fetch(url: str, accept: str | None = None) -> bytes:
        if url not in served:  # as the real fetch fails (test_the_real_download_is_capped)
            raise module.BootstrapError(f"cannot download {url} (offline): {module._HELP}")
        return served[url]

    monkeypatch.setattr(module, "fetch", fetch)
    return module, served


def serve_wheel(module: ModuleType, served: dict[str, bytes], index: str, wheel: bytes) -> None:
    filename, _ = module.wheel_for_this_machine()
    listing = {
        "files": [
            {"filename": "other.whl", "url": "x"},
            {"filename": filename, "url": "../files/uv.whl"},
        ]
    }
    served[index + "/uv/"] = json.dumps(listing).encode()
    served[index + "/files/uv.whl"] = wheel


def test_bootstrap_unpacks_the_pinned_wheel(
    bootstrap: tuple[ModuleType, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, served = bootstrap
    wheel = fake_wheel(module.UV_VERSION)
    filename, _ = module.wheel_for_this_machine()
    monkeypatch.setitem(
        module.WHEELS, module.machine_key(), (filename, hashlib.sha256(wheel).hexdigest())
    )
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://mirror.example/simple/")
    serve_wheel(module, served, "https://mirror.example/simple", wheel)
    assert module.main([str(tmp_path / "bin")]) == 0
    for program in ("uv", "uvx"):
        path = tmp_path / "bin" / program
        assert path.read_text() == f"#!{program}\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert f"fetching uv {module.UV_VERSION}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("digest", "does not have its pinned SHA-256"),
        ("listing", "does not list"),
        ("not-json", "does not list"),
        ("offline", "cannot download"),
    ],
)
def test_bootstrap_fails_with_one_line_saying_what_to_do(
    bootstrap: tuple[ModuleType, dict[str, bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tamper: str,
    message: str,
) -> None:
    module, served = bootstrap
    index = module.DEFAULT_INDEX
    serve_wheel(module, served, index, fake_wheel(module.UV_VERSION))  # not the pinned bytes
    if tamper == "listing":
        served[index + "/uv/"] = b'{"files": []}'
    elif tamper == "not-json":
        served[index + "/uv/"] = b"<html></html>"
    elif tamper == "offline":
        served.clear()
    assert module.main([str(tmp_path / "bin")]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("bootstrap-uv: ")
    assert message in err
    assert err.endswith("install uv yourself (https://docs.astral.sh/uv/) and run again")
    assert not (tmp_path / "bin" / "uv").exists()


def test_bootstrap_knows_no_wheel_for_other_machines(
    bootstrap: tuple[ModuleType, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, _ = bootstrap
    monkeypatch.setattr(module.platform, "machine", lambda: "riscv64")
    with pytest.raises(module.BootstrapError, match="no pinned uv wheel for linux riscv64"):
        module.wheel_for_this_machine()


def test_bootstrap_pins_the_wheels_of_both_supported_machines() -> None:
    module = load_script("bootstrap-uv.py")
    for (machine, _), (filename, sha256) in module.WHEELS.items():
        assert filename.startswith(f"uv-{module.UV_VERSION}-py3-none-")
        assert machine in filename
        assert len(sha256) == 64
        assert int(sha256, 16) >= 0


def test_bootstrap_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_script("bootstrap-uv.py").main([]) == 2
    assert "DIRECTORY" in capsys.readouterr().err


def test_the_real_download_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_script("bootstrap-uv.py")

    class Response(io.BytesIO):
        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()

    big = Response(b"x" * (module.MAX_WHEEL_BYTES + 1))
    monkeypatch.setattr(module.urllib.request, "urlopen", lambda *a, **k: big)
    with pytest.raises(module.BootstrapError, match="is larger than"):
        module.fetch("https://pypi.example/uv.whl")
    monkeypatch.setattr(
        module.urllib.request, "urlopen", lambda *a, **k: (_ for _ in ()).throw(OSError("down"))
    )
    with pytest.raises(module.BootstrapError, match=r"cannot download .* \(down\)"):
        module.fetch("https://pypi.example/uv.whl")
