"""README.md states what the code does: the variables, and the audit trail's examples."""

import json
import re
from pathlib import Path

from mcp_server_suite.audit.record import Succeeded, build_record
from mcp_server_suite.audit.trail import AUDIT_REFUSAL
from mcp_server_suite.config import KNOWN_VARIABLES
from mcp_server_suite.core.server import ClientInfo

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_the_configuration_table_lists_every_variable() -> None:
    rows = re.findall(r"^\| `(MCP_[A-Z_]+)` +\|", section("Configuration"), re.MULTILINE)
    assert sorted(rows) == sorted(KNOWN_VARIABLES)


def test_the_example_record_is_what_the_code_writes() -> None:
    text = section("Audit trail")
    shown = next(line for line in text.splitlines() if line.startswith('{"audit":'))
    record = json.loads(shown)
    assert '`{"max_rows":5,"query":"SELECT 1"}`' in text
    built = build_record(
        session=record["session"],
        started_ns=1_796_246_328_586_467_000,
        duration_s=0.0123456,
        request_id=7,
        client=ClientInfo.of("claude-code", "2.1.0"),
        tool="read_only_sql",
        arguments={"query": "SELECT 1", "max_rows": 5},
        arguments_mode="digest",
        outcome=Succeeded(rows=3, returned_bytes=456),
    )
    assert built.decode("ascii") == shown + "\n"


def test_the_refusal_shown_is_the_one_sent() -> None:
    assert AUDIT_REFUSAL.as_text() in section("Audit trail")
