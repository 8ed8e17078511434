"""The audit trail's variables, and what start-up loads for the trail (nothing heavy)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mcp_server_suite.config import KNOWN_VARIABLES, ConfigError, Settings


def test_defaults() -> None:
    settings = Settings.from_environ({})
    assert settings.audit_log == "stderr"
    assert settings.audit_arguments == "digest"
    assert settings.audit_required is False
    assert {"MCP_AUDIT_LOG", "MCP_AUDIT_ARGUMENTS", "MCP_AUDIT_REQUIRED"} <= KNOWN_VARIABLES


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"MCP_AUDIT_LOG": "off"}, ("off", "digest", False)),
        ({"MCP_AUDIT_LOG": "journal"}, ("journal", "digest", False)),
        ({"MCP_AUDIT_LOG": "/var/log/a.jsonl"}, (Path("/var/log/a.jsonl"), "digest", False)),
        ({"MCP_AUDIT_ARGUMENTS": "full"}, ("stderr", "full", False)),
        ({"MCP_AUDIT_REQUIRED": "yes"}, ("stderr", "digest", True)),
        ({"MCP_AUDIT_REQUIRED": "0", "MCP_AUDIT_LOG": "off"}, ("off", "digest", False)),
    ],
)
def test_valid_values(environ: dict[str, str], expected: tuple[object, str, bool]) -> None:
    settings = Settings.from_environ(environ)
    assert (settings.audit_log, settings.audit_arguments, settings.audit_required) == expected


@pytest.mark.parametrize(
    ("environ", "variable", "accepts"),
    [
        ({"MCP_AUDIT_LOG": "audit.jsonl"}, "MCP_AUDIT_LOG", "stderr, off, journal or an absolute"),
        ({"MCP_AUDIT_LOG": "STDERR"}, "MCP_AUDIT_LOG", "stderr, off, journal or an absolute"),
        ({"MCP_AUDIT_LOG": ""}, "MCP_AUDIT_LOG", "stderr, off, journal or an absolute"),
        ({"MCP_AUDIT_LOG": "/a\x00b"}, "MCP_AUDIT_LOG", "stderr, off, journal or an absolute"),
        ({"MCP_AUDIT_ARGUMENTS": "sql"}, "MCP_AUDIT_ARGUMENTS", "digest or full"),
        ({"MCP_AUDIT_REQUIRED": "maybe"}, "MCP_AUDIT_REQUIRED", "a boolean"),
        (
            {"MCP_AUDIT_REQUIRED": "true", "MCP_AUDIT_LOG": "off"},
            "MCP_AUDIT_REQUIRED",
            "false when MCP_AUDIT_LOG=off",
        ),
    ],
)
def test_invalid_values_name_the_variable(
    environ: dict[str, str], variable: str, accepts: str
) -> None:
    with pytest.raises(ConfigError, match=accepts) as caught:
        Settings.from_environ(environ)
    assert caught.value.variable == variable


@pytest.mark.parametrize("destination", ["stderr", "file"])
def test_start_up_loads_no_audit_record_code(tmp_path: Path, destination: str) -> None:
    # The records need hashlib, which start-up must not pay for: only the sink is opened
    # before the handshake. A fresh interpreter runs start-up's own steps and reports.
    log = "stderr" if destination == "stderr" else str(tmp_path / "audit.jsonl")
    probe = textwrap.dedent(
        f"""
        import sys
        from mcp_server_suite import __main__
        from mcp_server_suite.audit.sinks import open_sink
        from mcp_server_suite.config import Settings

        settings = Settings.from_environ({{"MCP_AUDIT_LOG": {log!r}}})
        sink = open_sink(settings.audit_log, required=settings.audit_required)
        heavy = ("hashlib", "socket", "asyncio", "mcp_server_suite.audit.record",
                 "mcp_server_suite.audit.trail")
        print(type(sink).__name__, sorted(name for name in heavy if name in sys.modules))
        """
    )
    # Without coverage's variables: measuring a subprocess imports what start-up does not.
    env = {name: value for name, value in os.environ.items() if not name.startswith("COVERAGE")}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    expected = "StderrSink" if destination == "stderr" else "FileSink"
    assert done.stdout.split(" ", 1) == [expected, "[]\n"]
