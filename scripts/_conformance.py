"""The official MCP conformance suite against the stdio server, through an HTTP bridge.

Called by `scripts/check-conformance.sh` once the Node.js programs are installed.

`@modelcontextprotocol/conformance` tests HTTP servers only, so `supergateway` serves the stdio
server over Streamable HTTP on 127.0.0.1 (`--stateful`: a 2026-07-28 request is answered by a
server process of its own, a handshake-era session by one process for the session, which is
how each era runs over stdio). The bridge is preloaded with `tests/clients/loopback.cjs`, which
binds every listening socket to 127.0.0.1. The suite then runs the scenarios a revision
requires (`--requirements`), and every check it reports is sorted into one of three verdicts:

- **pass**: the check succeeded;
- **n/a: server**: the check is listed, with its reason, in
  `tests/clients/conformance-not-applicable.json` as needing what a tools-only server does not
  offer (the suite's own fixture tools, prompts, resources, completions, logging, the tasks
  extension): it fails here by design;
- **n/a: bridge**: the check is listed there as decided by the HTTP layer, which here is the
  bridge, not the server (HTTP status codes, headers, sessions, streams, and requests the bridge
  refuses without passing them on, which `--wire` shows never reach the server);
- **not scored**: the suite reported it for information, or skipped it;
- **FAIL**: anything else that did not succeed (the suite's SHOULD-level warnings included).

The run fails when any check fails, when a listed server check did not fail or a listed bridge
check never ran (the list must stay exact, or it would hide a regression), or when a scenario
produced no results.

Usage: `_conformance.py [--requirements REVISION]... [--output DIR] [--wire DIR]` (default:
every revision in the list, output in a temporary directory; `--wire` records every line
between the bridge and each server process it starts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["NotApplicable", "Row", "classify", "main"]

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
NODE_MODULES: Final = REPO_ROOT / ".cache" / "clients" / "node_modules"
NODE: Final = NODE_MODULES / ".bin" / "node"
BRIDGE: Final = NODE_MODULES / "supergateway" / "dist" / "index.js"
SUITE: Final = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
LOOPBACK: Final = REPO_ROOT / "tests" / "clients" / "loopback.cjs"
NOT_APPLICABLE: Final = REPO_ROOT / "tests" / "clients" / "conformance-not-applicable.json"
HEALTH_PATH: Final = "/healthz"
MCP_PATH: Final = "/mcp"

# The bridge is ready within a second or two; a minute means it will not come up.
READY_TIMEOUT_S: Final = 60.0
# A whole revision takes about a minute on a busy two-core machine; ten is a hang.
SUITE_TIMEOUT_S: Final = 600.0
# The suite's per-scenario limit (its own default is 30 s); one server process is started per
# modern request, so a busy machine needs more than the default.
SCENARIO_TIMEOUT_MS: Final = 60_000

PASSED: Final = "SUCCESS"
# Statuses that carry no verdict: the suite reports them for information or when a check's
# precondition is absent, and scores neither.
UNSCORED: Final = frozenset({"INFO", "SKIPPED"})


@dataclass(frozen=True)
class Row:
    """One check the suite ran, with the verdict it gets here."""

    scenario: str
    check: str
    status: str
    verdict: str
    note: str


def _scenario_name(result_dir: str) -> str:
    """`server-tools-list-2026-12-01T21-10-51-716Z` -> `tools-list`."""
    name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", result_dir)
    return name.removeprefix("server-")


@dataclass(frozen=True)
class NotApplicable:
    """The checks of one revision this server is not judged by, each with its reason.

    Attributes:
        server: Checks that need what a tools-only server does not offer (the suite's fixture
            tools, prompts, resources, completions, logging, the tasks extension). They
            cannot pass; one that passes is stale.
        bridge: Checks decided by the HTTP bridge alone: HTTP status codes, headers, sessions
            and streams, or requests the bridge answers without passing them on. They are
            listed whatever their outcome, since it says nothing about the server.
    """

    server: Mapping[str, str]
    bridge: Mapping[str, str]


def classify(output: Path, listed: NotApplicable) -> tuple[list[Row], list[str]]:
    """Sort every check the suite wrote under `output` into its verdict.

    Args:
        output: The suite's output directory (one `checks.json` per scenario).
        listed: The revision's not-applicable checks, keyed `scenario:check`.

    Returns:
        The rows, in scenario order, and the listed checks that are stale: a server check
        that did not fail, or a bridge check that never ran.
    """
    rows: list[Row] = []
    failed_as_listed: set[str] = set()
    ran: set[str] = set()
    for checks_file in sorted(output.glob("*/checks.json")):
        scenario = _scenario_name(checks_file.parent.name)
        for check in json.loads(checks_file.read_text("utf-8")):
            key = f"{scenario}:{check['id']}"
            ran.add(key)
            status = check["status"]
            message = " ".join(str(check.get("errorMessage") or "").split())
            if key in listed.bridge:
                verdict, note = "n/a: bridge", listed.bridge[key]
            elif status == PASSED:
                verdict, note = "pass", ""
            elif status in UNSCORED:
                verdict, note = "not scored", message
            elif key in listed.server:
                failed_as_listed.add(key)
                verdict, note = "n/a: server", listed.server[key]
            else:
                verdict, note = "FAIL", message
            rows.append(Row(scenario, check["id"], status, verdict, note))
    stale = set(listed.server) - failed_as_listed
    stale |= set(listed.bridge) - ran
    return rows, sorted(stale)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def _bridge(port: int, data_dir: Path, wire: Path | None) -> Iterator[str]:
    """Serve the stdio server over Streamable HTTP on 127.0.0.1:`port`; yield its URL.

    With `wire`, every server process the bridge starts runs behind the wire recorder of the
    tests (`tests/support/wiretap.py`), which logs what reached the server and what it
    answered, one file per process, into that directory.
    """
    command = [sys.executable, "-m", "mcp_server_suite"]
    if wire is not None:
        command = [sys.executable, "-m", "tests.support.wiretap", str(wire), *command]
    server = shlex.join(command)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(data_dir.parent),
        "MCP_SAFE_DATA_DIR": str(data_dir),
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01",
    }
    command = [
        str(NODE), "--require", str(LOOPBACK), str(BRIDGE),
        "--stdio", server, "--outputTransport", "streamableHttp", "--stateful",
        "--port", str(port), "--streamableHttpPath", MCP_PATH,
        "--healthEndpoint", HEALTH_PATH, "--logLevel", "none",
    ]  # fmt: skip
    bridge = subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        health = f"http://127.0.0.1:{port}{HEALTH_PATH}"
        while True:
            if bridge.poll() is not None:
                raise RuntimeError(f"the bridge exited with status {bridge.returncode}")
            try:
                with urllib.request.urlopen(health, timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the bridge did not come up") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}{MCP_PATH}"
    finally:
        # The bridge leads its own process group, with the server processes it started.
        os.killpg(bridge.pid, 15)
        try:
            bridge.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(bridge.pid, 9)
            bridge.wait()


def _suite_summary(log: str) -> tuple[int, dict[str, str]]:
    """From the suite's log: how many scenarios it ran, and which it does not score (and why).

    Raises:
        RuntimeError: The log does not say how many scenarios ran (the suite did not start).
    """
    count = re.search(r"^Running requirements \S+ \((\d+) scenarios\)", log, re.M)
    if count is None:
        raise RuntimeError("the suite's log does not say how many scenarios it ran")
    unscored = dict(re.findall(r"^  [✓✗] ([a-z0-9-]+) \(([a-z-]+)\)$", log, re.M))
    return int(count[1]), unscored


def _run_revision(url: str, revision: str, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    if any(output.iterdir()):
        # Results of an earlier run would be counted with this one's.
        raise SystemExit(f"{output} is not empty; give --output a new directory")
    log = output / "suite.log"
    with log.open("w") as sink:
        subprocess.run(
            [
                str(NODE), "--require", str(LOOPBACK), str(SUITE), "server",
                "--url", url, "--requirements", revision,
                "--timeout", str(SCENARIO_TIMEOUT_MS), "--output-dir", str(output),
            ],
            cwd=output,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=SUITE_TIMEOUT_S,
            check=False,
        )  # fmt: skip


def _report(
    revision: str, rows: Sequence[Row], stale: Sequence[str], unscored: Mapping[str, str]
) -> bool:
    width = max((len(f"{row.scenario}:{row.check}") for row in rows), default=10)
    print(f"\n== {revision}: {len(rows)} checks")
    for row in rows:
        note = f"  ({row.note})" if row.note else ""
        scored = (
            f" [not scored by the suite: {unscored[row.scenario]}]"
            if row.scenario in unscored
            else ""
        )
        print(
            f"{row.verdict:<15} {f'{row.scenario}:{row.check}':<{width}} {row.status}{scored}{note}"
        )
    counts = {
        verdict: sum(row.verdict == verdict for row in rows)
        for verdict in {r.verdict for r in rows}
    }
    print(
        f"-- {revision}: "
        + ", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items()))
    )
    for key in stale:
        print(f"STALE           {key}  (listed as not applicable: it did not fail, or never ran)")
    return counts.get("FAIL", 0) == 0 and not stale


def main(argv: Sequence[str] | None = None) -> int:
    table: dict[str, dict[str, dict[str, str]]] = json.loads(NOT_APPLICABLE.read_text("utf-8"))
    listed = {revision: NotApplicable(**entries) for revision, entries in table.items()}
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--requirements", action="append", choices=sorted(listed))
    parser.add_argument("--output", type=Path, help="keep the suite's results here")
    parser.add_argument("--wire", type=Path, help="record what reaches the server here")
    args = parser.parse_args(argv)
    revisions = args.requirements or sorted(listed, reverse=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="conformance-") as scratch:
        output = args.output.resolve() if args.output else Path(scratch) / "results"
        data_dir = Path(scratch) / "sandbox"
        data_dir.mkdir()
        (data_dir / "hello.txt").write_text("hello\n", "utf-8")
        wire = args.wire.resolve() if args.wire else None
        with _bridge(_free_port(), data_dir, wire) as url:
            for revision in revisions:
                results = output / revision
                _run_revision(url, revision, results)
                rows, stale = classify(results, listed[revision])
                expected, unscored = _suite_summary((results / "suite.log").read_text("utf-8"))
                ran = {row.scenario for row in rows}
                if len(ran) != expected:
                    print(f"{revision}: {len(ran)} of {expected} scenarios reported results")
                    ok = False
                ok = _report(revision, rows, stale, unscored) and ok
    print("\nconformance: every applicable check passed" if ok else "\nconformance: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
