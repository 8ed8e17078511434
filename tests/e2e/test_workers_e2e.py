"""Worker threads in the real server: abandoned work never grows the pool past the slots,
and threads that cannot start never disable it.

Corpus case B106 (round 2, `proto.json`): with a 0.5 s deadline on `system_metrics` calls that
sample the CPU for 2 s, six waves of 16 calls grew the server to 65 threads. Python cannot stop
a thread, so each abandoned sample keeps its worker; the calls behind it must queue for a
worker, not start threads of their own.

Issue 21, item 2: started under a memory limit (`RLIMIT_AS`) smaller than one thread's stack
(glibc gives threads the stack size of `RLIMIT_STACK`), no worker can start; the pool used to
count each failed start, so after `limit` of them no worker ever started again, even once
the limit was lifted (with `prlimit`, as an operator would), and `stop` joined threads that
had never started (a traceback, exit 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import ServerProcess, running_server

# The case's parameters: 16 slots (the default), waves of 16 calls, six of them.
SLOTS = 16
WAVES = 6

# Besides its workers the server runs one thread: the main one, with the event loop (stdin
# and stdout are pipes, served by asyncio's transports, not by a reader thread).
THREADS_BESIDE_WORKERS = 1


# One thread's stack (glibc takes `RLIMIT_STACK`) does not fit under the memory limit, the
# interpreter and the server (about 100 MiB of address space with coverage) do.
STACK_BYTES = 1 << 30
ADDRESS_SPACE_BYTES = 900 << 20


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise KeyError("Threads")


@pytest.mark.e2e
def test_abandoned_samples_never_grow_the_pool_past_the_slots() -> None:
    environment = {
        "MCP_METRICS_CPU_SAMPLE_SECONDS": "2",
        "MCP_TOOL_TIMEOUT_SECONDS": "0.5",
    }
    with running_server(environment) as server:
        server.initialize()
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], threads_of(server.pid))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for wave in range(WAVES):
                answers = _wave(server, wave)
                assert all(answer["result"]["isError"] for answer in answers)
                codes = {json.loads(a["result"]["content"][0]["text"])["code"] for a in answers}
                assert codes == {"MCP_EXECUTION_TIMEOUT"}
            # The session still answers while the abandoned samples finish.
            assert server.request("ping")["result"] == {}
        finally:
            done.set()
            sampler.join()
        assert peak[0] <= SLOTS + THREADS_BESIDE_WORKERS, peak[0]
        server.close_stdin()
        assert server.wait() == 0


def _wave(server: ServerProcess, wave: int) -> list[dict[str, Any]]:
    base = 100 * (wave + 1)
    for index in range(SLOTS):
        server.send(
            {
                "jsonrpc": "2.0",
                "id": base + index,
                "method": "tools/call",
                "params": {"name": "system_metrics", "arguments": {}},
            }
        )
    return [server.recv() for _ in range(SLOTS)]


@pytest.mark.e2e
def test_threads_that_cannot_start_are_refused_until_they_can_then_the_pool_works() -> None:
    command = [
        "prlimit",
        # `soft:` sets the soft limit alone: lifting it again needs no privilege.
        f"--stack={STACK_BYTES}:",
        f"--as={ADDRESS_SPACE_BYTES}:",
        "--",
        sys.executable,
        "-X",
        "dev",
        "-m",
        "mcp_server_suite",
    ]
    environment = {"MCP_METRICS_CPU_SAMPLE_SECONDS": "0.01", "MCP_TOOL_TIMEOUT_SECONDS": "30"}
    with running_server(environment, command=command) as server:
        server.initialize()
        # More calls than there are slots: no failed start may take one up.
        for _ in range(SLOTS + 2):
            started = time.monotonic()
            result = server.call_tool("system_metrics", {})["result"]
            assert result["isError"] is True
            problem = json.loads(result["content"][0]["text"])
            assert problem["code"] == "MCP_INTERNAL_ERROR"
            assert problem["metadata"] == {"retryable": True}
            # Refused at once, not at the 30 s deadline.
            assert time.monotonic() - started < 5
        assert threads_of(server.pid) == THREADS_BESIDE_WORKERS
        server.wait_for_stderr("could not start a worker thread")
        subprocess.run(["prlimit", f"--pid={server.pid}", "--as=unlimited"], check=True)
        answers = _wave(server, 0)
        assert not any(answer["result"]["isError"] for answer in answers)
        assert threads_of(server.pid) > THREADS_BESIDE_WORKERS
        server.close_stdin()
        assert server.wait() == 0
        assert "Traceback" not in server.stderr, server.stderr
        assert server.stderr.count("could not start a worker thread") == 1
