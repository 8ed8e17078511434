"""The second round of the attack corpus's protocol cases, against the real server.

`tests/vectors/proto-round2.json` is a verbatim copy of the corpus's round 2 `proto.json`
(provenance in `tests/vectors/README.md`). Cases of kind `frames` are replayed as written:
each in its own session, in the state it names (`fresh`, or `ready` after the handshake),
its steps sent as raw bytes (`send_hex`), generated frames (`gen`) built as described, and
`wait_id` honoured; then a marker ping, and every response read until the marker's answer
and the answers the case expects from calls. The other kinds are scripted: a flood of
calls, a flood of pings nobody reads, end of input in the middle of a frame, a signal
before the handshake, input and output on regular files, the stderr a thousand invalid
lines cause.

Where the protocol issue overrides a case's expectation, `OVERRIDES` says so and why (the
corpus's README lets the issue win); `tests/vectors/README.md` lists them too. B106 (worker
threads against slots) belongs to the worker pool's change and is exercised by its tests.
The generated classes these cases sample are driven in `test_protocol_vectors.py`,
`tests/unit/test_jsonrpc.py` and `tests/unit/test_modern.py`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_server_suite.config import Settings
from tests.support.harness import REPO_ROOT, ServerProcess, base_environment, initialize_params

pytestmark = pytest.mark.e2e

# The default slot wait (`MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS`), which B092 leaves unset.
SLOT_WAIT_S = Settings().tool_acquire_timeout_seconds

VECTORS_FILE = REPO_ROOT / "tests" / "vectors" / "proto-round2.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS_FILE.read_text("utf-8"))
BY_ID = {case["id"]: case for case in CASES}

# Issue 11: a message whose id can be read gets its error with that id, even when another
# member is bad. Each of these still is a parse error, answered with the id it carries.
OVERRIDES: dict[str, list[dict[str, Any]]] = {
    "B011": [{"id": 11, "error": -32700}],  # a 400-digit integer in params
    "B015": [{"id": 15, "error": -32700}],  # a lone surrogate in the method
    "B019": [{"id": 19, "error": -32700}],  # a lone surrogate as a key in params
}

# Not replayed here, with the reason.
ELSEWHERE = {"B106": "worker threads against slots: the worker pool's change and its tests"}

FRAMES = [case for case in CASES if case["kind"] == "frames"]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("round2-sandbox")
    (root / "ok.txt").write_text("hello\n", "utf-8")
    return root


def test_the_copy_is_complete() -> None:
    assert len(CASES) == 34
    assert len(BY_ID) == len(CASES)
    kinds = {case["kind"] for case in CASES}
    assert kinds == {
        "frames",
        "concurrency",
        "flood_noread",
        "eof_midframe",
        "sigterm_handshake_idle",
        "init_call_eof",
        "stdin_file",
        "stderr_volume",
        "deadline_threads",
    }
    scripted = {case["id"] for case in CASES if case["kind"] != "frames"}
    assert scripted - set(ELSEWHERE) <= set(SCRIPTED)


def _environment(case: dict[str, Any], sandbox: Path) -> dict[str, str]:
    env = {"MCP_SAFE_DATA_DIR": str(sandbox), "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01"}
    env.update(case.get("env", {}))
    return env


def _open(server: ServerProcess, state: str) -> None:
    if state == "ready":
        server.initialize()


def _generated(step: dict[str, Any]) -> bytes:
    if step["gen"] == "pad_ping":
        # A ping padded to exactly `total` bytes, then the terminator.
        head = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"pad":"' % step["id"]
        tail = b'"}}'
        pad: int = step["total"] - len(head) - len(tail)
        terminator: str = step["term"]
        return head + b"x" * pad + tail + terminator.encode()
    if step["gen"] == "many_pings":
        return b"".join(
            b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n for n in range(step["n"])
        )
    raise AssertionError(f"unknown generator {step['gen']!r}")


def _read_to_eof(server: ServerProcess) -> list[dict[str, Any]]:
    replies: list[dict[str, Any]] = []
    while True:
        try:
            replies.append(server.recv(timeout=10))
        except EOFError:
            return replies


def _expected_ids(expect: list[dict[str, Any]]) -> list[Any]:
    return [item["id"] for item in expect if "id" in item]


def _replay(server: ServerProcess, case: dict[str, Any]) -> list[dict[str, Any]]:
    replies: list[dict[str, Any]] = []
    for step in case["steps"]:
        if "send_hex" in step:
            server.send_raw(bytes.fromhex(step["send_hex"]))
        elif "gen" in step:
            server.send_raw(_generated(step))
        elif "wait_id" in step:
            while not any(reply.get("id") == step["wait_id"] for reply in replies):
                replies.append(server.recv(timeout=30))
    marker = f"marker-{case['id']}"
    server.send({"jsonrpc": "2.0", "id": marker, "method": "ping"})
    replies += server.recv_through(marker, timeout=60)[:-1]
    expect = OVERRIDES.get(case["id"], case["expect"])
    # Calls are answered by their own tasks, possibly after the marker.
    wanted = _expected_ids(expect)
    deadline = time.monotonic() + 30
    while sum(1 for reply in replies if reply.get("id") in wanted) < len(wanted):
        replies.append(server.recv(timeout=max(deadline - time.monotonic(), 0.1)))
    server.expect_silence(float(case.get("settle", 0.3)) if case.get("metrics") else 0.3)
    return replies


def _check(case: dict[str, Any], replies: list[dict[str, Any]]) -> None:
    expect = OVERRIDES.get(case["id"], case["expect"])
    if case.get("record_only"):
        # Informational in the corpus: any well-formed answer to its own id.
        assert all(reply.get("jsonrpc") == "2.0" for reply in replies)
        return
    counted = [item for item in expect if "count_results" in item]
    if counted:
        results = [reply for reply in replies if "result" in reply]
        assert len(results) == counted[0]["count_results"]
        return
    remaining = list(replies)
    for item in expect:
        matches = [
            reply
            for reply in remaining
            if reply.get("id") == item["id"] and type(reply.get("id")) is type(item["id"])
        ]
        assert matches, (case["id"], item, replies)
        reply = matches[0]
        remaining.remove(reply)
        if "error" in item:
            assert reply["error"]["code"] == item["error"], (case["id"], reply)
            continue
        assert "result" in reply, (case["id"], reply)
        if "isError" in item:
            assert reply["result"]["isError"] is item["isError"], (case["id"], reply)
        for key, value in item.get("result_has", {}).items():
            assert reply["result"][key] == value
        if "detail_has" in item:
            problem = json.loads(reply["result"]["content"][0]["text"])
            assert item["detail_has"] in problem["detail"]
    # Nothing else: no request got a second answer, and nothing unasked was said.
    assert remaining == [], (case["id"], remaining)


@pytest.mark.parametrize("case", FRAMES, ids=[case["id"] for case in FRAMES])
def test_frames_case(case: dict[str, Any], sandbox: Path) -> None:
    server = ServerProcess(_environment(case, sandbox))
    try:
        _open(server, case["state"])
        _check(case, _replay(server, case))
        server.close_stdin()
        assert server.wait(timeout=15) == 0
        for marker in ("Traceback", "Exception ignored"):
            assert marker not in server.stderr
    finally:
        server.kill()


# --------------------------------------------------------------------------------------------
# The scripted kinds
# --------------------------------------------------------------------------------------------


def test_b092_a_flood_of_calls_runs_in_the_slots_waits_boundedly_and_is_refused_in_band(
    sandbox: Path,
) -> None:
    case = BY_ID["B092"]
    count = case["n"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        _open(server, case["state"])
        burst = b"".join(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": "system_metrics", "arguments": {}},
                }
            ).encode()
            + b"\n"
            for n in range(count)
        )
        sent = time.monotonic()
        server.send_raw(burst)
        answered: dict[int, tuple[float, dict[str, Any]]] = {}
        while len(answered) < count:
            reply = server.recv(timeout=60)
            answered[reply["id"]] = (time.monotonic() - sent, reply["result"])
        ran = [r for _, r in answered.values() if not r["isError"]]
        refused = [(at, r) for at, r in answered.values() if r["isError"]]
        # 16 slots, 64 waiting for at most 5 s: of the 2 s calls, three waves of 16 run.
        assert len(ran) >= 16
        assert len(ran) <= 16 + 64
        # A call that waited out its slot wait cannot be answered sooner than that wait after
        # the burst was sent, whatever the machine's speed, so every refusal before it is one
        # that did not wait. A fixed wall-clock bound tighter than this held only on a quick
        # machine.
        at_once = [at for at, _ in refused if at < SLOT_WAIT_S]
        assert len(at_once) >= count - 16 - 64
        for _, result in refused:
            problem = json.loads(result["content"][0]["text"])
            assert problem["code"] == "MCP_INTERNAL_ERROR"
            assert problem["metadata"]["retryable"] is True
        assert server.request("ping")["result"] == {}
    finally:
        server.kill()


def test_b093_pings_nobody_reads_stay_bounded_in_memory(sandbox: Path) -> None:
    case = BY_ID["B093"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        _open(server, case["state"])
        baseline = server.status_kib("VmRSS")
        pings = b"".join(
            b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n for n in range(case["n"])
        )
        writer = threading.Thread(target=server.send_raw, args=(pings,), daemon=True)
        writer.start()
        writer.join(3.0)
        growth_mib = (server.status_kib("VmHWM") - baseline) / 1024
        assert growth_mib <= case["expect"]["rss_growth_mib_max"], growth_mib
        # Read them all: every one is answered, in order.
        for n in range(case["n"]):
            assert server.recv(timeout=30)["id"] == n
        writer.join(30)
        assert not writer.is_alive()
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("cut", "expected_id"),
    [
        # Cut before the id has arrived whole: no id can be read.
        (b'{"jsonrpc":"2.0","id":95', None),
        # Cut after it: the id is read and answered (issue 11 overrides the corpus's null).
        (b'{"jsonrpc":"2.0","id":95,"method":"pi', 95),
    ],
)
def test_b095_end_of_input_in_the_middle_of_a_frame(
    sandbox: Path, cut: bytes, expected_id: int | None
) -> None:
    case = BY_ID["B095"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        _open(server, case["state"])
        server.send_raw(cut)
        server.close_stdin()
        replies = _read_to_eof(server)
        assert [(reply["id"], reply["error"]["code"]) for reply in replies] == [
            (expected_id, -32700)
        ]
        assert server.wait(timeout=15) == case["expect"]["rc"]
    finally:
        server.kill()


def test_b099_a_signal_before_the_handshake_exits_zero_at_once(sandbox: Path) -> None:
    case = BY_ID["B099"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        # The server is up and waiting for its first request.
        assert server.request("ping")["result"] == {}
        started = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(timeout=15) == case["expect"]["rc"]
        assert time.monotonic() - started < case["expect"]["exit_s_max"]
    finally:
        server.kill()


def test_b104_initialize_a_call_and_end_of_input_in_one_write(sandbox: Path) -> None:
    case = BY_ID["B104"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sandbox_fs_read", "arguments": {"relative_path": "ok.txt"}},
        }
        server.send_raw(json.dumps(init).encode() + b"\n" + json.dumps(call).encode() + b"\n")
        server.close_stdin()
        replies = _read_to_eof(server)
        assert len(replies) == case["expect"]["results"]
        assert replies[1]["result"]["structuredContent"]["content"] == "hello\n"
        assert server.wait(timeout=15) == case["expect"]["rc"]
    finally:
        server.kill()


def test_b103_regular_files_as_stdin_and_stdout(sandbox: Path, tmp_path: Path) -> None:
    case = BY_ID["B103"]
    requests = tmp_path / "requests.jsonl"
    responses = tmp_path / "responses.jsonl"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "sandbox_fs_read", "arguments": {"relative_path": "ok.txt"}},
    }
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    requests.write_text("".join(json.dumps(m) + "\n" for m in (init, call, ping)), "utf-8")
    with requests.open("rb") as stdin, responses.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-X", "dev", "-m", "mcp_server_suite"],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=base_environment(_environment(case, sandbox)),
            cwd=REPO_ROOT,
            timeout=30,
            check=False,
        )
    assert done.returncode == case["expect"]["rc"], done.stderr
    lines = [json.loads(line) for line in responses.read_text("utf-8").splitlines()]
    assert sorted(line["id"] for line in lines) == [1, 2, 3]
    assert len(lines) == case["expect"]["results"]


def test_b105_invalid_lines_cost_the_log_little(sandbox: Path) -> None:
    case = BY_ID["B105"]
    server = ServerProcess(_environment(case, sandbox))
    try:
        _open(server, case["state"])
        before = len(server.stderr.encode())
        server.send_raw(b"not json at all\n" * case["n"])
        for _ in range(case["n"]):
            assert server.recv(timeout=30)["error"]["code"] == -32700
        server.close_stdin()
        assert server.wait(timeout=15) == 0
        per_line = (len(server.stderr.encode()) - before) / case["n"]
        assert per_line <= case["expect"]["stderr_bytes_per_line_max"]
    finally:
        server.kill()


SCRIPTED = {
    "B092": test_b092_a_flood_of_calls_runs_in_the_slots_waits_boundedly_and_is_refused_in_band,
    "B093": test_b093_pings_nobody_reads_stay_bounded_in_memory,
    "B095": test_b095_end_of_input_in_the_middle_of_a_frame,
    "B099": test_b099_a_signal_before_the_handshake_exits_zero_at_once,
    "B103": test_b103_regular_files_as_stdin_and_stdout,
    "B104": test_b104_initialize_a_call_and_end_of_input_in_one_write,
    "B105": test_b105_invalid_lines_cost_the_log_little,
}
