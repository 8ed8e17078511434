"""The NixOS module, evaluated without nixpkgs, and the offline checks that guard it.

nix/checks/module-eval.nix evaluates nix/module.nix against a stub of nixpkgs' lib whose types
check values as nixpkgs' do, so these tests see the options and the units a host would get:

- what the module renders by default and for an audit file;
- that its option types and the server's own validation agree, for every variable both know,
  over generated values rather than a few chosen ones;
- the bounds of the variables that the server gains with the audit trail, the byte bound of
  SQL results and cross-mount reads;
- nix/checks/sandbox-allows.py, on the module's units and on units broken in each way it looks
  for;
- scripts/check-nix-offline.sh as a whole, on this tree and on copies broken in each step.
"""

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.tools.sql.functions import denial_reason
from tests.unit._nix import CHECKS_DIR, NIX_DIR, NixEvaluationError, evaluate, require_tool
from tests.unit._policy_repo import REPO_ROOT

SANDBOX_CHECK: Final = CHECKS_DIR / "sandbox-allows.py"
OFFLINE_CHECK: Final = REPO_ROOT / "scripts" / "check-nix-offline.sh"

# Each generated example is one nix-instantiate run over a whole batch of values (about 20 ms),
# so forty batches of fifty try two thousand values in a second or two under any profile.
BATCHES: Final = 40
BATCH_SIZE: Final = 50


def nix_string(text: str) -> str:
    """Quote a string as a Nix string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return f'"{escaped}"'


def units(values: str = "{ }") -> dict[str, Any]:
    """The units the module defines for services.mcp-server-suite = <values>, enabled."""
    result = evaluate(
        f"import <nix/checks/module-eval.nix> {{ values = {{ enable = true; }} // {values}; }}"
    )
    if not isinstance(result, dict):
        raise NixEvaluationError("module-eval.nix did not return an attribute set")
    return result


def rendered(name: str, values: Sequence[object]) -> list[str | None]:
    """Return, for each value of settings.<name>, the text the module renders, or None when
    the module's option type refuses it. One evaluation serves the whole batch."""
    expression = f"""
      let
        eval = import <nix/checks/module-eval.nix>;
        attempt = value:
          let
            result = builtins.tryEval (
              let environment = (eval {{
                values = {{ enable = true; settings.{name} = value; }};
              }}).environment;
              in builtins.deepSeq environment environment
            );
          in if result.success then result.value.{name} else null;
      in map attempt (builtins.fromJSON {nix_string(json.dumps(list(values)))})
    """
    result = evaluate(expression)
    if not isinstance(result, list):
        raise NixEvaluationError("the batch did not evaluate to a list")
    return [None if item is None else str(item) for item in result]


def server_accepts(name: str, text: str) -> bool:
    try:
        Settings.from_environ({name: text})
    except ConfigError:
        return False
    return True


# What the module renders.


def test_the_defaults_render_the_new_variables_and_the_journal() -> None:
    default = units()
    assert (
        default["environment"]
        | {
            "MCP_AUDIT_LOG": "journal",
            "MCP_AUDIT_ARGUMENTS": "digest",
            "MCP_AUDIT_REQUIRED": "false",
            "MCP_FS_CROSS_MOUNTS": "false",
            "MCP_SQL_MAX_RESULT_BYTES": "1048576",
        }
        == default["environment"]
    )
    assert default["socket"]["MaxConnections"] == 64
    # The journal needs no directory of the instance's own.
    assert default["service"]["LogsDirectory"] == []


def test_an_audit_file_gets_the_logs_directory_of_the_dynamic_user() -> None:
    audit = units('{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/audit.jsonl"; }')
    assert audit["environment"]["MCP_AUDIT_LOG"] == "/var/log/mcp-server-suite/audit.jsonl"
    assert audit["service"]["LogsDirectory"] == "mcp-server-suite"


@pytest.mark.parametrize(
    "values",
    [
        '{ settings.MCP_AUDIT_LOG = "syslog"; }',
        '{ settings.MCP_AUDIT_LOG = "audit.jsonl"; }',
        '{ settings.MCP_AUDIT_LOG = "/tmp/audit.jsonl"; }',
        '{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/../audit.jsonl"; }',
        '{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/.hidden"; }',
        '{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/a/b.jsonl"; }',
        '{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/"; }',
        '{ settings.MCP_AUDIT_ARGUMENTS = "none"; }',
        '{ settings.MCP_AUDIT_REQUIRED = "true"; }',
        "{ settings.MCP_FS_CROSS_MOUNTS = 1; }",
        '{ settings.MCP_SQL_MAX_RESULT_BYTES = "1048576"; }',
        '{ settings.MCP_SQL_TRUSTED_EXTENSIONS = [ "PostGIS" ]; }',
        "{ socket.maxConnections = 0; }",
    ],
)
def test_the_module_refuses_what_the_server_would_refuse(values: str) -> None:
    with pytest.raises(NixEvaluationError, match="is not a"):
        units(values)


def test_a_required_audit_trail_needs_a_destination() -> None:
    with pytest.raises(NixEvaluationError, match="MCP_AUDIT_REQUIRED needs an audit log"):
        units('{ settings = { MCP_AUDIT_LOG = "off"; MCP_AUDIT_REQUIRED = true; }; }')
    required = units("{ settings.MCP_AUDIT_REQUIRED = true; }")
    assert required["environment"]["MCP_AUDIT_REQUIRED"] == "true"


@pytest.mark.parametrize("extension", ["adminpack", "dblink", "file_fdw", "postgres_fdw"])
def test_an_extension_that_reaches_outside_the_transaction_is_never_trusted(
    extension: str,
) -> None:
    with pytest.raises(NixEvaluationError, match="MCP_SQL_TRUSTED_EXTENSIONS"):
        units(f'{{ settings.MCP_SQL_TRUSTED_EXTENSIONS = [ "postgis" "{extension}" ]; }}')


def test_trusted_extensions_render_as_a_comma_separated_list() -> None:
    trusted = units('{ settings.MCP_SQL_TRUSTED_EXTENSIONS = [ "postgis" "pg_trgm" ]; }')
    assert trusted["environment"]["MCP_SQL_TRUSTED_EXTENSIONS"] == "postgis,pg_trgm"
    assert units()["environment"]["MCP_SQL_TRUSTED_EXTENSIONS"] == ""


# The option types agree with the server, for every variable both know.


@dataclass(frozen=True)
class Family:
    """Variables of one kind, and the values to try on them."""

    names: tuple[str, ...]
    values: st.SearchStrategy[object]
    # Whether the server must accept exactly what the module accepts (numbers), or only
    # everything the module accepts (strings, where the module may be stricter).
    exact: bool


def numbers(*edges: float) -> st.SearchStrategy[object]:
    """Integers and floats around the given edges, and anywhere else."""
    near = st.sampled_from(edges).flatmap(
        lambda edge: st.one_of(
            st.just(edge),
            st.integers(min_value=-2, max_value=2).map(lambda step: int(edge) + step),
            st.floats(min_value=edge - 1, max_value=edge + 1, allow_nan=False),
        )
    )
    anywhere = st.one_of(
        st.integers(min_value=-(2**53), max_value=2**53),
        st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False),
    )
    return st.one_of(near, anywhere)


def texts() -> st.SearchStrategy[str]:
    # Environment variables and Nix strings hold neither NUL nor a lone surrogate.
    return st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80)


IDENTIFIER_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789_$.,A -\u00e9"

FAMILIES: Final = {
    "integers": Family(
        (
            "MCP_SQL_POOL_MAX_SIZE",
            "MCP_MAX_CONCURRENT_TOOLS",
            "MCP_MAX_ARGUMENT_DEPTH",
            "MCP_MAX_ARGUMENT_ITEMS",
        ),
        numbers(0, 1, 32, 64, 256, 1000, 100_000),
        exact=True,
    ),
    "seconds": Family(
        (
            "MCP_SQL_CONNECT_TIMEOUT",
            "MCP_SQL_QUERY_TIMEOUT",
            "MCP_METRICS_CPU_SAMPLE_SECONDS",
            "MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS",
            "MCP_TOOL_TIMEOUT_SECONDS",
        ),
        numbers(0, 2, 60, 300, 600),
        exact=True,
    ),
    "booleans": Family(
        ("MCP_METRICS_ENABLED",),
        st.one_of(st.booleans(), st.integers(0, 1), st.sampled_from(["true", "false"])),
        exact=False,
    ),
    "texts": Family(
        ("MCP_SQL_APPLICATION_NAME", "MCP_SERVER_SUITE_LOG_LEVEL", "MCP_METRICS_DISK_PATH"),
        st.one_of(texts(), st.sampled_from(["INFO", "debug", "/", "/var"])),
        exact=False,
    ),
    "lists": Family(
        ("MCP_SQL_SCHEMAS", "MCP_SQL_ALLOWED_FUNCTIONS"),
        st.lists(
            st.one_of(
                st.from_regex(r"[a-z_][a-z0-9_$]{0,62}(\.[a-z_][a-z0-9_$]{0,62})?", fullmatch=True),
                st.text(IDENTIFIER_ALPHABET, max_size=70),
                st.just("pg_catalog"),
            ),
            max_size=4,
        ),
        exact=False,
    ),
}


def denied_by_policy(name: str, text: str) -> bool:
    """Whether the server refuses a well-formed function list for what it names.

    The module checks the list's shape; which functions act outside a read-only transaction
    is the server's own denylist, and a denied name stops the server at start-up (exit 78).
    """
    if name != "MCP_SQL_ALLOWED_FUNCTIONS":
        return False
    entries = (entry.strip().rpartition(".")[2] for entry in text.split(","))
    return any(denial_reason(entry) is not None for entry in entries if entry)


def python_text(value: object) -> str:
    """What the server would read for a value the module refused: its plainest text."""
    return json.dumps(value) if not isinstance(value, str) else value


@settings(max_examples=BATCHES)
@given(st.data())
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_module_accepts_what_the_server_accepts(family: str, data: st.DataObject) -> None:
    kind = FAMILIES[family]
    name = data.draw(st.sampled_from(kind.names), label="variable")
    values = data.draw(st.lists(kind.values, min_size=BATCH_SIZE, max_size=BATCH_SIZE))
    for value, text in zip(values, rendered(name, values), strict=True):
        if text is not None and not denied_by_policy(name, text):
            assert server_accepts(name, text), f"{name}: module renders {text!r}, server refuses"
        elif kind.exact:
            assert not server_accepts(name, python_text(value)), (
                f"{name}: module refuses {value!r}, server accepts it"
            )


# The variables the server gains in the same round: bounds as their issues give them.


NEW_BOUNDS: Final = {"MCP_SQL_MAX_RESULT_BYTES": (4096, 16_777_216)}


@settings(max_examples=BATCHES)
@given(
    st.lists(
        numbers(4095, 4096, 1_048_576, 16_777_216, 16_777_217),
        min_size=BATCH_SIZE,
        max_size=BATCH_SIZE,
    )
)
def test_the_result_byte_bound_takes_4096_to_16777216(values: list[object]) -> None:
    low, high = NEW_BOUNDS["MCP_SQL_MAX_RESULT_BYTES"]
    for value, text in zip(values, rendered("MCP_SQL_MAX_RESULT_BYTES", values), strict=True):
        valid = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        assert (text is not None) == valid, (value, text)
        if valid:
            assert text == str(value)


@settings(max_examples=BATCHES)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["journal", "stderr", "off", "/var/log/mcp-server-suite/a.jsonl"]),
            st.builds(
                "{}{}".format,
                st.sampled_from(["/var/log/mcp-server-suite/", "/var/log/", "/", ""]),
                texts(),
            ),
        ),
        min_size=BATCH_SIZE,
        max_size=BATCH_SIZE,
    )
)
def test_an_audit_destination_is_a_keyword_or_a_file_in_the_logs_directory(
    values: list[str],
) -> None:
    for value, text in zip(values, rendered("MCP_AUDIT_LOG", values), strict=True):
        if text is None:
            continue
        assert text == value
        if value not in {"journal", "stderr", "off"}:
            path = Path(value)
            assert str(path.parent) == "/var/log/mcp-server-suite", value
            assert not path.name.startswith("."), value
            assert "\n" not in value, value


# The sandbox check, on the module's units and on broken ones.


@pytest.fixture(scope="module")
def syscall_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    table = subprocess.run(
        [require_tool("systemd-analyze"), "syscall-filter", "--no-pager"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp_path_factory.mktemp("systemd") / "syscall-filter.txt"
    path.write_text(table, encoding="utf-8")
    return path


def sandbox_check(units_json: dict[str, Any], groups: Path, tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "units.json"
    path.write_text(json.dumps(units_json), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(SANDBOX_CHECK), "--units", str(path), "--syscall-groups", str(groups)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return result.returncode, result.stdout + result.stderr


Change = Callable[[dict[str, Any]], None]


def set_service(directive: str, value: object) -> Change:
    def change(units_json: dict[str, Any]) -> None:
        units_json["service"][directive] = value

    return change


def set_environment(name: str, value: str) -> Change:
    def change(units_json: dict[str, Any]) -> None:
        units_json["environment"][name] = value

    return change


@pytest.mark.parametrize(
    "values",
    [
        "{ }",
        '{ databaseAddresses = [ "192.0.2.10/32" ]; }',
        '{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/audit.jsonl"; }',
        '{ settings.MCP_AUDIT_LOG = "off"; }',
    ],
    ids=["journal", "tcp", "audit-file", "off"],
)
def test_the_modules_sandbox_allows_the_audit_trail_and_openat2(
    values: str, syscall_groups: Path, tmp_path: Path
) -> None:
    returncode, output = sandbox_check(units(values), syscall_groups, tmp_path)
    assert returncode == 0, output
    assert "the sandbox allows the audit trail" in output


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        (
            set_service("RestrictAddressFamilies", ["AF_INET", "AF_INET6"]),
            "RestrictAddressFamilies= refuses AF_UNIX",
        ),
        (set_service("RestrictAddressFamilies", ["~AF_UNIX"]), "refuses AF_UNIX"),
        (
            set_service("SystemCallFilter", ["@system-service", "~@privileged @network-io"]),
            "SystemCallFilter= refuses sendto",
        ),
        (set_service("SystemCallFilter", ["~sendmsg"]), "SystemCallFilter= refuses sendmsg"),
        (set_service("InaccessiblePaths", ["-/run"]), "InaccessiblePaths=-/run hides"),
        (
            set_service("TemporaryFileSystem", ["/run/systemd:ro"]),
            "TemporaryFileSystem=/run/systemd:ro hides",
        ),
        (set_service("RootDirectory", "/srv/root"), "RootDirectory= gives the instance"),
        (
            set_service("SystemCallFilter", ["@system-service", "~openat2"]),
            "SystemCallFilter= refuses openat2",
        ),
        (
            set_environment("MCP_AUDIT_LOG", "/var/lib/audit.jsonl"),
            "is not directly in a LogsDirectory=",
        ),
    ],
    ids=[
        "no-af-unix",
        "af-unix-denied",
        "no-network-io",
        "no-sendmsg",
        "run-inaccessible",
        "run-replaced",
        "another-root",
        "no-openat2",
        "file-outside-logs",
    ],
)
def test_the_sandbox_check_finds_each_way_of_cutting_the_server_off(
    change: Change, finding: str, syscall_groups: Path, tmp_path: Path
) -> None:
    broken = units()
    change(broken)
    returncode, output = sandbox_check(broken, syscall_groups, tmp_path)
    assert returncode == 1, output
    assert finding in output, output


def load_sandbox_module() -> Any:
    spec = importlib.util.spec_from_file_location("sandbox_allows", SANDBOX_CHECK)
    if spec is None or spec.loader is None:
        raise AssertionError(f"cannot load {SANDBOX_CHECK}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SANDBOX: Final = load_sandbox_module()


@settings(max_examples=BATCHES)
@given(
    st.lists(
        st.sampled_from(["", "run", "systemd", "journal", "socket", "log", "var", "other"]),
        max_size=5,
    ),
    st.sampled_from(["", "-", "+"]),
)
def test_any_path_above_the_journal_socket_is_found_and_no_other(
    parts: list[str], prefix: str
) -> None:
    path = "/" + "/".join(part for part in parts if part)
    service = {"InaccessiblePaths": [prefix + path]}
    above = path == "/" or "/run/systemd/journal/socket".startswith(path.rstrip("/") + "/")
    above = above or path == "/run/systemd/journal/socket"
    assert bool(SANDBOX.hidden(service, "/run/systemd/journal/socket")) == above, path


# The version report of the container-security job.


def test_the_stack_report_lists_each_package_and_survives_a_missing_one() -> None:
    # A stub flake whose package set knows one package: the report is shaped by
    # nix/checks/stack-versions.nix alone, and a package nixpkgs lacks shows as "-".
    report = evaluate(
        "import <nix/checks/stack-versions.nix> {"
        ' system = "test";'
        " flake.inputs.nixpkgs.legacyPackages.test.callPackage = _: _: {"
        '   app = { version = "3.13.5"; pkgs.pydantic.version = "2.12.3"; };'
        " };"
        " }"
    )
    assert report["python"] == "3.13.5"
    assert report["pydantic"] == "2.12.3"
    assert {"mypy", "pglast", "pytest", "pytest-asyncio"} <= set(report)
    assert "sqlglot" not in report
    assert report["pglast"] == "-"


# scripts/check-nix-offline.sh as a whole.


def offline_check(root: Path) -> subprocess.CompletedProcess[str]:
    require_tool("nix-instantiate")
    require_tool("systemd-analyze")
    return subprocess.run(
        ["bash", str(root / "scripts" / "check-nix-offline.sh"), "--python", sys.executable],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def copy_of_the_checks(tmp_path: Path) -> Path:
    """The files check-nix-offline.sh reads, in a scratch tree that a test may break."""
    root = tmp_path / "tree"
    shutil.copytree(NIX_DIR, root / "nix")
    (root / "scripts").mkdir()
    for script in ("check-nix-offline.sh", "render-units.py"):
        shutil.copy2(REPO_ROOT / "scripts" / script, root / "scripts" / script)
    shutil.copy2(REPO_ROOT / "flake.nix", root / "flake.nix")
    shutil.copy2(REPO_ROOT / "flake.lock", root / "flake.lock")
    return root


def test_the_offline_check_passes_on_this_tree() -> None:
    result = offline_check(REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check-nix-offline: all checks passed" in result.stdout
    assert "--check-config accepts the" in result.stdout
    assert "module.json: the sandbox allows the audit trail (journal) and openat2" in result.stdout


@pytest.mark.parametrize(
    ("file", "search", "replace", "failure"),
    [
        (
            "nix/hardening.nix",
            '    "AF_UNIX" # sockets passed in by systemd',
            '    "AF_NETLINK" # sockets passed in by systemd',
            "RestrictAddressFamilies= refuses AF_UNIX",
        ),
        (
            "nix/hardening.nix",
            '  ProtectSystem = "strict";\n',
            '  ProtectSystem = "strict";\n  ProtectSystm = "strict";\n',
            "systemd does not accept the isolated units as written",
        ),
        (
            # Every capability back in the bounding set: exposure 2.0 on systemd 252.
            "nix/hardening.nix",
            '  CapabilityBoundingSet = [ "" ];\n',
            "",
            "of the isolated units is above 1.0",
        ),
        (
            # Integers rendered as "8.0": the module's types still pass, the server refuses.
            "nix/environment.nix",
            "    else\n      toString value;",
            '    else if builtins.isInt value then\n      "${toString value}.0"\n'
            "    else\n      toString value;",
            "expected an integer from",
        ),
        (
            "nix/module.nix",
            "default = 1048576;",
            "default = 1024;",
            "services.mcp-server-suite.settings.MCP_SQL_MAX_RESULT_BYTES: 1024 is not a",
        ),
    ],
    ids=["no-af-unix", "unknown-directive", "capabilities", "integer-text", "bad-default"],
)
def test_the_offline_check_fails_each_step_it_owns(
    tmp_path: Path, file: str, search: str, replace: str, failure: str
) -> None:
    root = copy_of_the_checks(tmp_path)
    target = root / file
    text = target.read_text(encoding="utf-8")
    assert text.count(search) == 1, f"{search!r} must occur once in {file}"
    target.write_text(text.replace(search, replace), encoding="utf-8")
    result = offline_check(root)
    assert result.returncode != 0, result.stdout
    assert failure in result.stdout + result.stderr, result.stdout + result.stderr
