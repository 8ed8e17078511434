"""The documentation states what the code does, and every command in it is tested or marked.

README.md is the front page and docs/ the site (docs/development/documentation.md). These
tests hold the pages to the code: the configuration reference to `config.py` in both
directions, the error table to `schemas/problems.py`, the audit trail's examples to what the
code writes; and they hold the convention that every shell block is either run by
tests/e2e/test_doc_commands.py or marked as an illustration.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import pytest

from mcp_server_suite.audit.record import Succeeded, build_record
from mcp_server_suite.audit.trail import AUDIT_REFUSAL
from mcp_server_suite.config import KNOWN_VARIABLES, ConfigError, Settings
from mcp_server_suite.core.server import ClientInfo
from mcp_server_suite.schemas.problems import PROBLEM_TYPES, MCPErrorCode
from tests.support.client_examples import documentation_examples
from tests.support.doc_blocks import SHELL_LANGUAGES, blocks, documents, shell_blocks
from tests.unit._nix import require_tool
from tests.unit._policy_repo import REPO_ROOT

DOCS: Final = REPO_ROOT / "docs"
README: Final = REPO_ROOT / "README.md"
SRC: Final = REPO_ROOT / "src" / "mcp_server_suite"

# The issue that made README.md a front page set its length: a page a newcomer reads whole.
MAX_README_WORDS: Final = 2_500

# Variables the tests read (tests/support/postgres.py), which the documentation names for
# contributors; the server never reads them.
TEST_VARIABLES: Final = frozenset({"MCP_TEST_PG_BINDIR", "MCP_TEST_PG_MAJOR"})

# A variable's name ends in a letter or digit: `MCP_SQL_*` names a family, not a variable.
# The reference writes ranges as typesetters do, with an en dash between the bounds.
DASH: Final = "\N{EN DASH}"

_VARIABLE: Final = re.compile(r"\bMCP_[A-Z][A-Z0-9_]*[A-Z0-9]\b")
# `--check-config`'s warning about an unknown variable, as a page quotes it.
_MISSPELT: Final = re.compile(r"unknown configuration variable MCP_[A-Z0-9_]+")
_ROW: Final = re.compile(r"^\| `(?P<name>MCP_[A-Z0-9_]+)` +\|(?P<cells>.*)\|$", re.MULTILINE)


def page(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    """The text of one `##` section of a page."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


# --- the front page ------------------------------------------------------------------------


def test_the_readme_is_a_front_page_of_at_most_2500_words() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.split()) <= MAX_README_WORDS
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    for required in (
        "Status",
        "Platform: Linux only",
        "Quickstart",
        "Use it with your client",
        "Point it at your data",
        "Text files only",
        "Security at a glance",
        "Documentation",
    ):
        assert required in headings, required


def test_the_readme_names_each_clients_file_and_key() -> None:
    table = section(README.read_text(encoding="utf-8"), "Use it with your client")
    for client, where, key in (
        ("Claude Desktop", "claude_desktop_config.json", "`mcpServers`"),
        ("Claude Code", "`.mcp.json`", "`mcpServers`"),
        ("VS Code", "`.vscode/mcp.json`", "`servers`"),
        ("Cursor", "`.cursor/mcp.json`", "`mcpServers`"),
    ):
        row = next(line for line in table.splitlines() if line.startswith(f"| {client} |"))
        assert where in row, client
        assert key in row, client


# --- every block is tested or marked -------------------------------------------------------


def test_every_fence_names_its_language() -> None:
    # A block without a language could be a shell block that escapes the marker rule.
    unnamed = [block.where for path in documents() for block in blocks(path) if not block.language]
    assert unnamed == []


def test_every_shell_block_is_run_by_a_test_or_marked_as_an_illustration() -> None:
    found = shell_blocks()
    assert len(found) > 10
    unmarked = [block.where for block in found if block.marker is None]
    assert unmarked == [], "precede each with <!-- doc-test: NAME --> or <!-- illustration: WHY -->"
    for block in found:
        # A name to find the scenario by, or a reason a reader can check.
        assert block.marker_value, block.where
        if block.marker == "illustration":
            assert len(block.marker_value.split()) >= 3, block.where


def test_the_block_rules_see_what_a_reader_sees(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "README.md"
    page.write_text(
        "# T\n\n## Install\n\n<!-- doc-test: one -->\n```bash\necho a\n```\n\n"
        "```sh\necho b\n```\n\n- In a list:\n\n  <!-- illustration: needs a daemon here -->\n"
        "  ```console\n  echo c\n  ```\n\n```json\n{}\n```\n",
        encoding="utf-8",
    )
    found = list(blocks(page, tmp_path))
    assert [(b.language, b.marker, b.marker_value, b.heading) for b in found] == [
        ("bash", "doc-test", "one", "Install"),
        ("sh", None, "", "Install"),
        ("console", "illustration", "needs a daemon here", "Install"),
        ("json", None, "", "Install"),
    ]
    assert found[2].text == "echo c\n"
    assert {b.language for b in found} - {"json"} <= SHELL_LANGUAGES
    page.write_text("```bash\necho never closed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        list(blocks(page, tmp_path))


# --- the configuration reference, both ways --------------------------------------------------


def configuration_rows() -> dict[str, list[str]]:
    text = section(page("reference/configuration.md"), "Variables")
    rows: dict[str, list[str]] = {}
    for match in _ROW.finditer(text):
        assert match["name"] not in rows, match["name"]
        rows[match["name"]] = [cell.strip() for cell in match["cells"].split("|")]
    return rows


def variables_the_code_names() -> set[str]:
    """Every `MCP_*` name in a string of the package, the problem codes and docstrings aside.

    A docstring may name a misspelling on purpose (`config.probable_variables` does), and
    reads nothing.
    """
    codes = {code.value for code in MCPErrorCode}
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                names.update(_VARIABLE.findall(node.value))
    return names - codes


def test_the_code_reads_exactly_the_variables_it_knows() -> None:
    assert variables_the_code_names() == set(KNOWN_VARIABLES)


def test_the_reference_lists_every_variable_the_code_reads_and_no_other() -> None:
    assert set(configuration_rows()) == variables_the_code_names()


def test_every_variable_the_documentation_names_is_one_the_server_reads() -> None:
    codes = {code.value for code in MCPErrorCode}
    for path in documents():
        # The warning for a misspelt variable names one the server does not read, on purpose.
        text = _MISSPELT.sub("", path.read_text(encoding="utf-8"))
        named = set(_VARIABLE.findall(text)) - codes
        assert named <= KNOWN_VARIABLES | TEST_VARIABLES, (path.name, named - KNOWN_VARIABLES)


# Each variable's field of `Settings`; the rest are named after their field.
_FIELDS: Final = {
    "MCP_SQL_DSN": "sql_dsn",
    "MCP_SQL_DSN_FILE": "sql_dsn",
    "MCP_SERVER_SUITE_LOG_LEVEL": "log_level",
}


def documented_default(value: object) -> str:
    """A default as the reference writes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, frozenset)):
        return ",".join(sorted(value)) if value else "empty"
    return str(value)


def first_value(cell: str) -> str:
    """The value a Default cell starts with: its first code span, or its first word."""
    code = re.match(r"`([^`]+)`", cell)
    return code[1] if code else cell.split(maxsplit=1)[0]


def test_every_default_is_the_codes() -> None:
    defaults = Settings()
    names = {field.name for field in fields(Settings)}
    for variable, (default, _constraint, _effect) in configuration_rows().items():
        name = _FIELDS.get(variable, variable.removeprefix("MCP_").lower())
        assert name in names, variable
        assert first_value(default) == documented_default(getattr(defaults, name)), variable


def accepts(variable: str, value: str) -> bool:
    try:
        Settings.from_environ({variable: value})
    except ConfigError:
        return False
    return True


def probes(constraint: str) -> list[tuple[str, bool]] | None:
    """Values at the edges of a documented constraint, each with whether it is accepted."""
    number = r"(\d[\d,]*(?:\.\d+)?)"
    if match := re.fullmatch(rf"{number}{DASH}{number}", constraint):
        low, high = (int(part.replace(",", "")) for part in match.groups())
        return [(str(low), True), (str(high), True), (str(low - 1), False), (str(high + 1), False)]
    if match := re.fullmatch(rf"{number}{DASH}{number} s", constraint):
        low_s, high_s = (float(part) for part in match.groups())
        return [
            (f"{low_s:g}", True),
            (f"{high_s:g}", True),
            (f"{high_s + 0.5:g}", False),
            (f"{low_s - 0.5:g}", False),
        ]
    if match := re.fullmatch(rf"> 0, ≤ {number} s", constraint):
        high_s = float(match[1])
        return [("0", False), ("0.01", True), (f"{high_s:g}", True), (f"{high_s + 0.5:g}", False)]
    if match := re.fullmatch(rf"{number}{DASH}{number} printable ASCII characters", constraint):
        low, high = int(match[1]), int(match[2])
        return [("a" * low, True), ("a" * high, True), ("a" * (high + 1), False)] + (
            [("a" * (low - 1), False)] if low > 0 else []
        )
    if constraint.startswith("boolean"):
        return [(word, True) for word in ("true", "false", "1", "0", "yes", "off")] + [
            ("maybe", False)
        ]
    return None


# Constraints with a number that the probes do not read, each with the test that holds it.
UNPROBED: Final = {
    # The DSN file's size bound: tests/unit/test_config.py reads files at and past it.
    "MCP_SQL_DSN_FILE",
}


def test_every_numeric_and_boolean_constraint_holds_at_its_bounds() -> None:
    probed = set()
    for variable, (_default, constraint, _effect) in configuration_rows().items():
        cases = probes(constraint)
        if cases is None:
            # A constraint the probes cannot read must hold no number and no boolean, or a
            # limit could change in the code and stay in the table.
            assert variable in UNPROBED or not re.search(r"\d|boolean", constraint), variable
            continue
        probed.add(variable)
        for value, accepted in cases:
            assert accepts(variable, value) is accepted, (variable, constraint, value)
    assert len(probed) >= 14


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        (f"1{DASH}32", [("1", True), ("32", True), ("0", False), ("33", False)]),
        (
            f"4,096{DASH}16,777,216",
            [("4096", True), ("16777216", True), ("4095", False), ("16777217", False)],
        ),
        (f"0{DASH}60 s", [("0", True), ("60", True), ("60.5", False), ("-0.5", False)]),
        ("> 0, ≤ 2 s", [("0", False), ("0.01", True), ("2", True), ("2.5", False)]),
        ("comma-separated lower-case schema names", None),
    ],
)
def test_constraints_are_read_as_written(constraint: str, expected: object) -> None:
    assert probes(constraint) == expected


# --- the error model -------------------------------------------------------------------------


def test_the_error_table_is_the_codes() -> None:
    text = page("reference/errors.md")
    rows = re.findall(
        r"^\| `(MCP_[A-Z_]+)` +\| `([^`]+)` +\| (\d{3}) +\| `(-\d+)` +\|", text, re.MULTILINE
    )
    documented = {code: (uri, int(status), int(jsonrpc)) for code, uri, status, jsonrpc in rows}
    assert documented == {
        code.value: (row.uri, row.status, int(row.jsonrpc_code))
        for code, row in PROBLEM_TYPES.items()
    }


# --- the audit trail's examples --------------------------------------------------------------


def test_the_example_record_is_what_the_code_writes() -> None:
    text = page("how-to/audit-trail.md")
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
    assert AUDIT_REFUSAL.as_text() in page("how-to/audit-trail.md")


# --- illustrations that mirror what is tested ------------------------------------------------


def examples_of(kind: str, document: str | None = None) -> list[dict[str, Any]]:
    found = documentation_examples(documents(), REPO_ROOT)
    return [
        dict(example.server)
        for example in found
        if example.kind == kind and (document is None or example.document == document)
    ]


def illustration(path: str, starts: str) -> str:
    """The shell block of a page that starts so, its continued lines joined."""
    (found,) = [
        block.text
        for block in shell_blocks()
        if block.path == path and block.text.startswith(starts)
    ]
    return found.replace("\\\n", " ")


def test_the_docker_run_command_has_the_options_of_the_tested_configuration() -> None:
    (configuration,) = examples_of("docker")
    command = shlex.split(illustration("docs/how-to/container.md", "docker run"))
    assert command[-2:] == ["<", "examples/requests.jsonl"]
    arguments = command[1:-2]
    tested = configuration["args"]
    # The same options in the same order, the mount aside: its host side is the example data
    # in the one, the placeholder of the other.
    mount = tested.index("-v")
    assert arguments[: mount + 1] == tested[: mount + 1]
    assert arguments[mount + 1] == "$PWD/examples/data:/safe_data_dir:ro"
    assert tested[mount + 1] == "/srv/mcp-data:/safe_data_dir:ro"
    assert arguments[mount + 2 :] == tested[mount + 2 :]


def test_the_compose_command_names_the_composed_service() -> None:
    command = shlex.split(illustration("docs/how-to/container.md", "docker compose"))
    compose = (REPO_ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert command[:6] == ["docker", "compose", "run", "--rm", "-T", "mcp-server"]
    assert re.search(r"^  mcp-server:$", compose, re.MULTILINE)


def test_the_nix_run_commands_use_the_tested_configurations_flags() -> None:
    (configuration,) = examples_of("nix")
    flags = configuration["args"][: configuration["args"].index("run")]
    for line in illustration("docs/how-to/nix.md", "MCP_SAFE_DATA_DIR").splitlines():
        words = shlex.split(line.rstrip("\\"))
        if words and words[0] == "nix":
            assert words[1 : 1 + len(flags)] == flags
            assert words[1 + len(flags) : 3 + len(flags)] == ["run", "."]


def test_the_claude_code_command_adds_the_readmes_entry() -> None:
    command = shlex.split(illustration("docs/how-to/clients.md", "claude mcp add-json"))
    assert command[:6] == ["claude", "mcp", "add-json", "--scope", "user", "mcp-server-suite"]
    (readme_entry, _vs_code) = examples_of("clone", "README.md")
    assert json.loads(command[6]) == {"type": "stdio", **readme_entry}


def test_the_nixos_example_is_nix_that_parses() -> None:
    nix_instantiate = require_tool("nix-instantiate")
    (example,) = [
        block.text for block in blocks(DOCS / "how-to" / "nixos.md") if block.language == "nix"
    ]
    # A dummy store: parsing needs none, and an ordinary user cannot open the system's.
    parsed = subprocess.run(
        [nix_instantiate, "--store", "dummy://", "--parse", "-"],
        input=example,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert parsed.returncode == 0, parsed.stderr
    assert "services.mcp-server-suite" in example


# --- the site's link rewriting (scripts/docs-hooks.py) -------------------------------------


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_hooks", REPO_ROOT / "scripts" / "docs-hooks.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("target", "source", "page", "expected"),
    [
        ("docs/how-to/clients.md", "README.md", "index.md", "how-to/clients.md"),
        (
            "docs/how-to/clients.md#the-entries",
            "README.md",
            "index.md",
            "how-to/clients.md#the-entries",
        ),
        ("SECURITY.md", "README.md", "index.md", "security.md"),
        ("LICENSE", "README.md", "index.md", "license.md"),
        (
            "docs/explanation/threat-model.md",
            "SECURITY.md",
            "security.md",
            "explanation/threat-model.md",
        ),
        (
            "../../README.md#quickstart",
            "docs/how-to/install.md",
            "how-to/install.md",
            "../index.md#quickstart",
        ),
        (
            "../../../README.md",
            "docs/reference/tools/files.md",
            "reference/tools/files.md",
            "../../index.md",
        ),
        ("nix.md#nix-run", "docs/how-to/clients.md", "how-to/clients.md", "nix.md#nix-run"),
        (
            "../../CONTRIBUTING.md#conventions",
            "docs/explanation/architecture.md",
            "explanation/architecture.md",
            "../contributing.md#conventions",
        ),
        # Links that leave both the site and the root documents stay, and --strict refuses them.
        ("../scripts/test.sh", "docs/benchmarks.md", "benchmarks.md", "../scripts/test.sh"),
        ("https://example.org/a.md", "README.md", "index.md", "https://example.org/a.md"),
        ("#status", "README.md", "index.md", "#status"),
    ],
)
def test_links_are_rewritten_from_the_repository_to_the_site(
    target: str, source: str, page: str, expected: str
) -> None:
    site_link: Callable[[str, str, str], str] = load_hooks().site_link
    assert site_link(target, source, page) == expected


def test_only_inline_link_targets_are_rewritten() -> None:
    rewrite: Callable[[str, str, str], str] = load_hooks().rewrite_links
    text = (
        'See [the guide](docs/how-to/nix.md "Nix") and `docs/how-to/nix.md` and [x](SECURITY.md).'
    )
    assert rewrite(text, "README.md", "index.md") == (
        'See [the guide](how-to/nix.md "Nix") and `docs/how-to/nix.md` and [x](security.md).'
    )


def test_every_root_document_becomes_a_page_in_the_navigation() -> None:
    hooks = load_hooks()
    navigation = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name, site_page in hooks.ROOT_PAGES.items():
        assert (REPO_ROOT / name).is_file(), name
        assert f": {site_page}\n" in navigation, site_page
    # A page of the same name under docs/ would clash with the generated one.
    assert not any((DOCS / site_page).exists() for site_page in hooks.ROOT_PAGES.values())
