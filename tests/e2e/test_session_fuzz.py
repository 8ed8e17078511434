"""Seeded sessions across the phase hand-over, with a stderr nobody reads (issue 21).

Each session is drawn from its seed: an era (a legacy handshake, or 2026-07-28 requests
each with its `_meta`), then pings, lists, cached file reads (answered in the blocking
inline phase), listings, metrics (worker threads, so the event loop), unknown methods,
cancellations and malformed frames (an id that can be read, and one that cannot), sent cut
at random byte boundaries with random pauses, while the client stalls its reads now and
then. Stderr is a one-page pipe the client never reads and the trail writes every call's
arguments there, so it is full after a few calls. The session ends with end of input or
with SIGTERM.

What must hold, whatever the seed: every request is answered exactly once (a cancelled call
at most once), with the answer its kind calls for, across every hand-over between the
blocking phases and the event loop; a frame whose id cannot be read is answered with a null
id; the process exits 0 without a traceback. `MCP_FUZZ_SESSIONS` raises the number of
seeds (12 by default; the issue's campaign ran 1,352 sessions).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support.harness import ServerProcess

pytestmark = pytest.mark.e2e

SESSIONS: Final = int(os.environ.get("MCP_FUZZ_SESSIONS", "12"))

MODERN_META: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz-" + "c" * 200, "version": "1"},
}

# How long a session may take to answer everything once its input is sent.
ANSWERS_WITHIN_S: Final = 30.0


@dataclass
class Plan:
    """The frames of one session and what each request must get."""

    modern: bool
    frames: list[bytes] = field(default_factory=list)
    # Request id -> "result", an error code, or "subscription".
    expected: dict[Any, int | str] = field(default_factory=dict)
    # Calls a cancellation may have ended first: answered at most once.
    cancellable: set[Any] = field(default_factory=set)
    null_ids: int = 0

    def request(
        self, request_id: Any, method: str, params: dict[str, Any], expect: int | str
    ) -> None:
        if self.modern:
            params = {**params, "_meta": MODERN_META}
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.frames.append(json.dumps(message).encode() + b"\n")
        self.expected[request_id] = expect

    def call(self, request_id: Any, name: str, arguments: dict[str, Any]) -> None:
        self.request(request_id, "tools/call", {"name": name, "arguments": arguments}, "result")


def _ping(plan: Plan, request_id: Any) -> None:
    # 2026-07-28 has no ping: it is an unknown method there.
    plan.request(request_id, "ping", {}, -32601 if plan.modern else "result")


def _cancel(plan: Plan, target: Any) -> None:
    plan.cancellable.add(target)
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": target},
    }
    plan.frames.append(json.dumps(cancel).encode() + b"\n")


def _malformed(plan: Plan, request_id: Any) -> None:
    # A trailing comma: a parse error, answered with its id.
    text = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    plan.frames.append(text[:-1].encode() + b",}\n")
    plan.expected[request_id] = -32700


def _unreadable(plan: Plan, index: int) -> None:
    # `0<digits>` is not a JSON number: the id cannot be read, and the answer goes to null.
    plan.frames.append(b'{"jsonrpc":"2.0","id":0%d,"method":"ping"}\n' % index)
    plan.null_ids += 1


_KINDS: Final = {
    "ping": 10,
    "list": 6,
    "read": 30,
    "listing": 8,
    "metrics": 10,
    "cancel": 6,
    "malformed": 5,
    "unreadable": 3,
    "unknown": 3,
    "discover": 3,
    "subscribe": 1,
}

_CALLS: Final = {
    "read": ("sandbox_fs_read", {"relative_path": "hello.txt"}),
    "listing": ("sandbox_fs_list", {"relative_path": "docs"}),
    "metrics": ("system_metrics", {}),
}


def draw(seed: int) -> Plan:
    rng = random.Random(seed)
    plan = Plan(modern=rng.random() < 0.5)
    if not plan.modern:
        info = {"name": "fuzz-" + "l" * 200, "version": "1"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
        plan.request("init", "initialize", params, "result")
    calls: list[Any] = []
    for index in range(rng.randint(40, 160)):
        request_id: Any = index if rng.random() < 0.5 else f"r-{seed}-{index}"
        kind = rng.choices(list(_KINDS), weights=list(_KINDS.values()))[0]
        if kind in _CALLS:
            name, arguments = _CALLS[kind]
            plan.call(request_id, name, arguments)
            calls.append(request_id)
        elif kind == "ping":
            _ping(plan, request_id)
        elif kind == "list":
            plan.request(request_id, "tools/list", {}, "result")
        elif kind == "cancel" and calls:
            _cancel(plan, rng.choice(calls))
        elif kind == "malformed":
            _malformed(plan, request_id)
        elif kind == "unreadable":
            _unreadable(plan, index)
        elif kind == "unknown":
            plan.request(request_id, "tools/execute", {}, -32601)
        elif kind == "discover" and plan.modern:
            plan.request(request_id, "server/discover", {}, "result")
        elif kind == "subscribe" and plan.modern:
            plan.request(request_id, "subscriptions/listen", {"notifications": {}}, "subscription")
    return plan


def cut(rng: random.Random, data: bytes) -> list[bytes]:
    pieces = []
    at = 0
    while at < len(data):
        size = rng.choice([1, 2, 7, 40, 300, 1000, 5000])
        pieces.append(data[at : at + size])
        at += size
    return pieces


def send_all(server: ServerProcess, rng: random.Random, pieces: list[bytes], end: bool) -> None:
    for piece in pieces:
        server.send_raw(piece)
        if rng.random() < 0.05:
            time.sleep(rng.choice([0.0005, 0.002, 0.01]))
    if end:
        server.close_stdin()


def check(plan: Plan, answers: list[dict[str, Any]], *, ended: bool) -> None:
    counted = Counter(json.dumps(a["id"]) for a in answers if "id" in a and a["id"] is not None)
    twice = [request_id for request_id, count in counted.items() if count > 1]
    assert not twice, f"answered more than once: {twice}"
    by_id = {json.dumps(a["id"]): a for a in answers if "id" in a}
    for request_id, expect in plan.expected.items():
        answer = by_id.get(json.dumps(request_id))
        if answer is None:
            assert request_id in plan.cancellable or (expect == "subscription" and not ended), (
                f"no answer to {request_id!r}"
            )
            continue
        if isinstance(expect, int):
            assert answer["error"]["code"] == expect, answer
        else:
            assert "result" in answer, answer
            if "isError" in answer["result"]:
                assert answer["result"]["isError"] is False, answer
    stray = set(counted) - {json.dumps(request_id) for request_id in plan.expected}
    assert not stray, f"answers to ids never sent: {stray}"
    nulls = [a for a in answers if "id" in a and a["id"] is None]
    assert len(nulls) == plan.null_ids, nulls
    assert all(a["error"]["code"] == -32700 for a in nulls)


@pytest.mark.parametrize("seed", range(SESSIONS))
def test_every_request_is_answered_exactly_once(seed: int, sandbox: str, tmp_path: Path) -> None:
    plan = draw(seed)
    rng = random.Random(seed * 7919 + 1)
    by_signal = rng.random() < 0.3
    env = {
        "MCP_SAFE_DATA_DIR": sandbox,
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "0.001",
        "MCP_AUDIT_ARGUMENTS": "full",
    }
    server = ServerProcess(env, stderr_unread=True)
    try:
        pieces = cut(rng, b"".join(plan.frames))
        writer = threading.Thread(
            target=send_all, args=(server, rng, pieces, not by_signal), daemon=True
        )
        writer.start()
        answers: list[dict[str, Any]] = []
        # Subscriptions are answered only at the end.
        wanted = {
            json.dumps(request_id)
            for request_id, expect in plan.expected.items()
            if request_id not in plan.cancellable and expect != "subscription"
        }
        deadline = time.monotonic() + ANSWERS_WITHIN_S
        while True:
            if by_signal and wanted <= {json.dumps(a.get("id")) for a in answers}:
                break
            if rng.random() < 0.02:
                time.sleep(0.05)  # the client stalls its reads for a moment
            try:
                answers.append(server.recv(max(deadline - time.monotonic(), 0.01)))
            except EOFError:
                break
        writer.join(ANSWERS_WITHIN_S)
        if by_signal:
            server.signal(signal.SIGTERM)
            server.close_stdin()
            try:
                while True:
                    answers.append(server.recv(ANSWERS_WITHIN_S))
            except EOFError:
                pass
        assert server.wait(ANSWERS_WITHIN_S) == 0
        server.read_stderr()
        check(plan, answers, ended=True)
    finally:
        server.kill()
    assert "Traceback" not in server.stderr, server.stderr
