"""The command line: --help, --version, --check-config and configuration errors."""

from pathlib import Path

import pytest

from mcp_server_suite import __version__
from mcp_server_suite.__main__ import EXIT_CONFIG, main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"mcp-server-suite {__version__}"


def test_help_lists_the_tools_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    words = ("--check-config", "read_only_sql", "sandbox_fs_read", "sandbox_fs_list", "78")
    for word in (*words, "system_metrics"):
        assert word in out


def test_check_config_reports_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check-config"]) == 0
    out = capsys.readouterr().out
    # The verdict comes last, after everything it judges.
    assert out.splitlines()[0] == "configuration:"
    assert out.splitlines()[-1] == "verdict: valid"
    assert "system_metrics: enabled" in out
    assert "sandbox_fs_read: disabled (MCP_SAFE_DATA_DIR is unset)" in out
    assert "read_only_sql: disabled" in out


def test_check_config_with_metrics_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_METRICS_ENABLED", "false")
    assert main(["--check-config"]) == 0
    assert "system_metrics: disabled (MCP_METRICS_ENABLED is false)" in capsys.readouterr().out


def test_invalid_configuration_exits_78_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_SQL_POOL_MAX_SIZE", "abc")
    assert main([]) == EXIT_CONFIG == 78
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "MCP_SQL_POOL_MAX_SIZE" in lines[0]
    assert "an integer from 1 to 32" in lines[0]


def test_a_misspelt_variable_names_the_one_probably_meant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("MCP_SAFE_DATA_DRI", str(tmp_path))
    assert main(["--check-config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "warning: ignoring unknown configuration variable MCP_SAFE_DATA_DRI; "
        "did you mean MCP_SAFE_DATA_DIR?"
    ) in lines
    assert lines[-1] == "verdict: valid; 1 warning above"


def test_the_server_warns_about_a_misspelt_variable_on_stderr(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_server_suite import __main__ as entry

    monkeypatch.setenv("MCP_SQL_DNS", "postgresql://x@/y")
    # The session itself is not started: only what start-up says before it matters here.
    monkeypatch.setattr(entry, "claim_stdio", _stop_before_the_session)
    with pytest.raises(_Stopped):
        main([])
    assert (
        "ignoring unknown configuration variable MCP_SQL_DNS; did you mean MCP_SQL_DSN?"
        in caplog.text
    )


class _Stopped(Exception):
    pass


def _stop_before_the_session() -> tuple[int, int]:
    raise _Stopped


def test_check_config_offline_says_the_database_was_not_contacted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_SQL_DSN", "postgresql://reader@/app?host=/nonexistent")
    assert main(["--check-config", "--offline"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "database: not contacted (--offline), so the SQL tools' role was not audited",
        "verdict: valid offline; run without --offline to audit the role",
    ]
