"""Command-line options, and the operator-facing summary of `--check-config`."""

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from mcp_server_suite import SERVER_NAME, __version__
from mcp_server_suite.config import ConfigError, SecretStr, Settings
from mcp_server_suite.core.registry import ToolRegistry

if TYPE_CHECKING:
    from mcp_server_suite.audit.sinks import AuditSink

__all__ = [
    "CheckSummary",
    "check_operations",
    "check_summary",
    "describe_configuration",
    "parse_arguments",
]

# libpq's own spellings (libpq-connect, "sslmode"); anything else fails only at connect time.
_SSL_MODES: Final = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})
_MAX_PORT: Final = 65535

_DESCRIPTION = """\
A hardened Model Context Protocol server. It speaks JSON-RPC 2.0 over stdin and stdout,
one message per line, and is configured only through MCP_* environment variables."""

_EPILOG = """\
tools:
  read_only_sql     enabled by MCP_SQL_DSN or MCP_SQL_DSN_FILE
  sandbox_fs_read   enabled by MCP_SAFE_DATA_DIR
  sandbox_fs_list   enabled by MCP_SAFE_DATA_DIR
  system_metrics    enabled unless MCP_METRICS_ENABLED=false

Logs go to stderr (MCP_SERVER_SUITE_LOG_LEVEL). Exit status 78 means invalid configuration."""


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line; `--help` and `--version` print and exit here."""
    parser = argparse.ArgumentParser(
        prog=SERVER_NAME,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help=(
            "validate the configuration, print which tools would be served, audit the "
            "database role when SQL is configured (one line per problem), and exit"
        ),
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="with --check-config: do not connect to anything",
    )
    return parser.parse_args(argv)


def describe_configuration(settings: Settings, registry: ToolRegistry) -> str:
    """Summarise a valid configuration for an operator; the DSN is never shown."""
    reasons = {
        "read_only_sql": "MCP_SQL_DSN and MCP_SQL_DSN_FILE are unset",
        "sql_schema": "MCP_SQL_DSN and MCP_SQL_DSN_FILE are unset",
        "sandbox_fs_read": "MCP_SAFE_DATA_DIR is unset",
        "sandbox_fs_list": "MCP_SAFE_DATA_DIR is unset",
        "system_metrics": "MCP_METRICS_ENABLED is false",
    }
    lines = ["configuration:"]
    for name, reason in reasons.items():
        lines.append(f"  {name}: {'enabled' if name in registry else 'disabled (' + reason + ')'}")
    lines.append(
        f"  limits: {settings.max_concurrent_tools} concurrent calls, "
        f"{settings.tool_timeout_seconds:g} s deadline, "
        f"{settings.tool_acquire_timeout_seconds:g} s slot wait"
    )
    return "\n".join(lines)


def check_operations(
    settings: Settings, audit_sink: "AuditSink | None", environ: Mapping[str, str]
) -> str:
    """Check what start-up does not, and describe the audit trail, for `--check-config`.

    Start-up stays fast and loads nothing it does not need; an operator checking a
    configuration wants more: the disk `system_metrics` reports must exist, and the DSN must
    be one libpq can parse, with a port and an `sslmode` it accepts (libpq itself would say so
    only at the first query).

    Args:
        settings: The validated configuration.
        audit_sink: The opened audit destination, or None when the trail is off.
        environ: The environment, to name the variable the DSN came from.

    Returns:
        Summary lines to print after the tools.

    Raises:
        ConfigError: The disk path does not exist, or the DSN is malformed; a DSN is never
            shown, nor libpq's message about it, which repeats it.
    """
    if settings.metrics_enabled and not os.path.exists(settings.metrics_disk_path):
        raise ConfigError(
            "MCP_METRICS_DISK_PATH", "an existing path", str(settings.metrics_disk_path)
        )
    if settings.sql_dsn is not None:
        variable = "MCP_SQL_DSN_FILE" if "MCP_SQL_DSN_FILE" in environ else "MCP_SQL_DSN"
        _check_dsn(variable, settings.sql_dsn)
    if audit_sink is None:
        trail = "off (MCP_AUDIT_LOG=off)"
    else:
        arguments = "in full" if settings.audit_arguments == "full" else "as a SHA-256 digest"
        failure = (
            "a call that cannot be recorded is refused"
            if settings.audit_required
            else "a failed write is reported and the call goes on"
        )
        trail = (
            f"{audit_sink.description}, one line per tools/call, arguments {arguments}; {failure}"
        )
    return f"  audit trail: {trail}"


def _check_dsn(variable: str, dsn: SecretStr) -> None:
    accepts = "a connection URI that libpq can parse"
    try:
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415  # Only for the check.
    except ImportError:
        raise ConfigError(
            variable, "psycopg with libpq to check it (install the binary extra)"
        ) from None
    try:
        options = conninfo_to_dict(dsn.get_secret_value())
    except Exception:  # noqa: BLE001  # psycopg's error repeats the DSN: only the fact counts.
        raise ConfigError(
            variable, accepts + " (check percent-encoding, brackets and parameter names)"
        ) from None
    ports = str(options.get("port", "")).split(",")
    if not all(port == "" or _valid_port(port) for port in ports):
        raise ConfigError(variable, accepts + ", with ports from 1 to 65535")
    sslmode = options.get("sslmode")
    if sslmode is not None and sslmode not in _SSL_MODES:
        raise ConfigError(
            variable, accepts + ", with sslmode one of " + ", ".join(sorted(_SSL_MODES))
        )


def _valid_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 1 <= int(text) <= _MAX_PORT


def _count(number: int, noun: str) -> str:
    # "1 problem", "2 problems".
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


@dataclass(frozen=True, slots=True)
class CheckSummary:
    """The end of `--check-config`'s report.

    Attributes:
        lines: Warnings, what was checked, one line per problem, and the verdict, last.
        failed: Whether the check failed (a problem, or no connection): exit status 1.
    """

    lines: tuple[str, ...]
    failed: bool


def check_summary(settings: Settings, *, offline: bool, warnings: Sequence[str]) -> CheckSummary:
    """Return the end of `--check-config`'s report: warnings, what was checked, the verdict.

    Online, the SQL tools' database is reached once and their role audited
    (`role_audit.audit_database`): a line says which server and role were checked, then one
    `problem:` line per finding, each naming the object and the fix. `--offline` contacts
    nothing, and the report says so. The verdict is the last line; warnings alone (unknown
    variables) never fail the check.

    Args:
        settings: The validated configuration.
        offline: `--offline` was given.
        warnings: Lines about the environment (unknown variables), printed as `warning:`.

    Returns:
        The lines to print, and whether the check failed.
    """
    lines = [f"warning: {warning}" for warning in warnings]
    noted = f"; {_count(len(warnings), 'warning')} above" if warnings else ""
    if settings.sql_dsn is None:
        return CheckSummary((*lines, f"verdict: valid{noted}"), failed=False)
    if offline:
        return CheckSummary(
            (
                *lines,
                "database: not contacted (--offline), so the SQL tools' role was not audited",
                f"verdict: valid offline{noted}; run without --offline to audit the role",
            ),
            failed=False,
        )
    from mcp_server_suite.tools.sql.deployment import (  # noqa: PLC0415
        SUPERUSER_LINE,
        deployment_problems,
    )
    from mcp_server_suite.tools.sql.role_audit import audit_database  # noqa: PLC0415
    from mcp_server_suite.tools.sql.tool import trusted_code  # noqa: PLC0415

    # A connection that cannot be made, or a transaction pooler, fails every call whatever
    # the role may do; the role audit reports a superuser itself.
    deployment, connected = deployment_problems(
        settings.sql_dsn.get_secret_value(), connect_timeout=settings.sql_connect_timeout
    )
    if not connected:
        return CheckSummary(
            (
                *lines,
                f"database: cannot connect: {deployment[0]}",
                "verdict: invalid: the SQL tools' database could not be reached or refused "
                f"the login{noted}",
            ),
            failed=True,
        )
    pooling = [line for line in deployment if line != SUPERUSER_LINE]
    audit = audit_database(
        settings.sql_dsn.get_secret_value(),
        trusted_code(settings),
        connect_timeout=settings.sql_connect_timeout,
    )
    if audit.server is None:
        return CheckSummary(
            (
                *lines,
                f"database: cannot connect: {audit.error}",
                "verdict: invalid: the SQL tools' database could not be reached or refused "
                f"the login{noted}",
            ),
            failed=True,
        )
    found = audit.problems
    result = _count(len(found), "problem") if found else "no problem"
    lines.append(f"database: connected to {audit.server}; role audit: {result}")
    lines.extend(f"problem: read_only_sql: {line}" for line in pooling)
    lines.extend(f"problem: read_only_sql: {problem.line()}" for problem in found)
    refusing = len(pooling) + sum(problem.refuses for problem in found)
    advisory = len(found) + len(pooling) - refusing
    if refusing:
        remain = "remains" if refusing == 1 else "remain"
        more = f"; {advisory} more to fix" if advisory else ""
        verdict = (
            "invalid: read_only_sql and sql_schema refuse every call while "
            f"{_count(refusing, 'problem')} above {remain}{more}"
        )
    elif advisory:
        verdict = (
            f"needs attention: {_count(advisory, 'problem')} to fix (calls are served meanwhile)"
        )
    else:
        verdict = "valid"
    return CheckSummary((*lines, f"verdict: {verdict}{noted}"), failed=bool(found or pooling))
