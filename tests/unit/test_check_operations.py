"""`--check-config` beyond the tools: the disk path, a malformed DSN, the audit destination."""

from pathlib import Path

import pytest

from mcp_server_suite.__main__ import EXIT_CONFIG, main
from mcp_server_suite.cli import check_operations
from mcp_server_suite.config import ConfigError, SecretStr, Settings

# hygiene: allow-secret-fixture
CANARY = "Check-canary-9f2e"


def test_the_audit_destination_is_described(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert main(["--check-config"]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == (
        "  audit trail: stderr, one line per tools/call, arguments as a SHA-256 digest; "
        "a failed write is reported and the call goes on"
    )
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("MCP_AUDIT_LOG", str(log))
    monkeypatch.setenv("MCP_AUDIT_ARGUMENTS", "full")
    monkeypatch.setenv("MCP_AUDIT_REQUIRED", "true")
    assert main(["--check-config"]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == (
        f"  audit trail: {log}, one line per tools/call, arguments in full; "
        "a call that cannot be recorded is refused"
    )
    # The check opened the log as start-up would: it exists, empty and private.
    assert log.read_bytes() == b""
    monkeypatch.setenv("MCP_AUDIT_LOG", "off")
    monkeypatch.delenv("MCP_AUDIT_REQUIRED")
    assert main(["--check-config"]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == "  audit trail: off (MCP_AUDIT_LOG=off)"


def test_an_unwritable_audit_log_fails_the_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCP_AUDIT_LOG", str(tmp_path / "missing" / "audit.jsonl"))
    assert main(["--check-config"]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "MCP_AUDIT_LOG" in captured.err
    assert "ENOENT" in captured.err


def test_a_missing_disk_path_fails_the_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCP_METRICS_DISK_PATH", str(tmp_path / "gone"))
    assert main(["--check-config"]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line == (
        f"mcp-server-suite: invalid configuration: MCP_METRICS_DISK_PATH='{tmp_path / 'gone'}': "
        "expected an existing path"
    )
    # With the metrics tool off, its disk path does not matter.
    monkeypatch.setenv("MCP_METRICS_ENABLED", "false")
    assert main(["--check-config"]) == 0


MALFORMED = [
    pytest.param(f"postgresql://u:{CANARY}@h/%zz", id="percent-encoding"),
    pytest.param(f"postgresql://u:{CANARY}@[::1/db", id="ipv6-bracket"),
    pytest.param(f"postgresql://u:{CANARY}@h/db?passwd=x", id="unknown-parameter"),
    pytest.param(f"postgresql://u:{CANARY}@h:abc/db", id="port-not-a-number"),
    pytest.param(f"postgresql://u:{CANARY}@h:99999/db", id="port-out-of-range"),
    pytest.param(f"postgresql://u:{CANARY}@h:0/db", id="port-zero"),
    pytest.param(f"postgresql://u:{CANARY}@a:5432,b:x/db", id="second-port"),
    pytest.param(f"postgresql://u:{CANARY}@h/db?sslmode=verify_full", id="sslmode"),
    pytest.param(f"postgresql://u:{CANARY}@h/db?application_name=%00", id="nul"),
]


@pytest.mark.parametrize("dsn", MALFORMED)
def test_a_malformed_dsn_fails_the_check_without_showing_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dsn: str
) -> None:
    monkeypatch.setenv("MCP_SQL_DSN", dsn)
    assert main(["--check-config"]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(
        "mcp-server-suite: invalid configuration: MCP_SQL_DSN: expected a connection URI"
    )
    assert CANARY not in line


def test_a_malformed_dsn_from_a_file_names_the_file_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "dsn"
    secret.write_text(f"postgresql://u:{CANARY}@h/%zz\n", encoding="utf-8")
    monkeypatch.setenv("MCP_SQL_DSN_FILE", str(secret))
    assert main(["--check-config"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "MCP_SQL_DSN_FILE: expected a connection URI that libpq can parse" in err
    assert CANARY not in err


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://reader@/app?host=/run/postgresql",
        "postgres://reader@db.internal:5432/app?sslmode=verify-full&sslrootcert=system",
        "postgresql://reader@a:5432,b:6432/app?target_session_attrs=read-only",
        "postgresql://reader@a,b/app",
        "postgresql://[::1]:5432/app",
    ],
)
def test_well_formed_dsns_pass(dsn: str) -> None:
    settings = Settings(sql_dsn=SecretStr(dsn))
    assert check_operations(settings, None, {"MCP_SQL_DSN": dsn}).startswith("  audit trail:")


def test_without_psycopg_the_dsn_cannot_be_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "psycopg.conninfo", None)
    settings = Settings(sql_dsn=SecretStr("postgresql://u@h/db"))
    with pytest.raises(ConfigError, match="psycopg with libpq") as caught:
        check_operations(settings, None, {})
    assert caught.value.variable == "MCP_SQL_DSN"


def test_the_check_closes_the_audit_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("MCP_AUDIT_LOG", str(log))

    def open_logs() -> list[str]:
        fds = Path("/proc/self/fd")
        return [p.name for p in fds.iterdir() if p.is_symlink() and str(p.readlink()) == str(log)]

    assert main(["--check-config"]) == 0
    assert open_logs() == []
    monkeypatch.setenv("MCP_METRICS_DISK_PATH", str(tmp_path / "gone"))
    assert main(["--check-config"]) == EXIT_CONFIG
    assert open_logs() == []
