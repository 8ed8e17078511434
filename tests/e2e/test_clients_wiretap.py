"""The wire recorder the real-client tests rely on: it must change nothing and miss nothing.

`tests.support.wiretap` sits between a client and a stand-in server (a few lines of Python):
the bytes each side receives must be exactly the bytes the other sent, every line must be in
the log in order, and the server's stderr and exit status must be kept, including for a
server that fails or is stopped by a signal the relay passes on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness import REPO_ROOT, base_environment
from tests.support.wiretap import read_transcripts, wiretap_command

pytestmark = [pytest.mark.e2e, pytest.mark.interop]

# Echoes each line with a prefix, reports on stderr, and exits with the status it is given.
ECHO_SERVER = """
import sys
for line in sys.stdin:
    sys.stdout.write("echo " + line)
    sys.stdout.flush()
    print("saw", len(line), "characters", file=sys.stderr, flush=True)
sys.exit(int(sys.argv[1]))
"""

# Waits for a signal; SIGTERM ends it with the default disposition.
SLEEPER = "import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"

RUN_TIMEOUT_S = 30


def relay(tmp_path: Path, *command: str) -> list[str]:
    return wiretap_command(tmp_path / "wire", [sys.executable, "-c", *command])


def test_the_relay_changes_nothing_and_logs_everything(tmp_path: Path) -> None:
    sent = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' + "caf\u00e9 \\ud800\n".encode() + b"x\n"
    run = subprocess.run(
        relay(tmp_path, ECHO_SERVER, "3"),
        input=sent,
        capture_output=True,
        env=base_environment(),
        cwd=REPO_ROOT,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 3
    assert run.stdout == b"".join(b"echo " + line + b"\n" for line in sent.splitlines())
    assert run.stderr.decode().splitlines() == [
        "saw 41 characters",
        "saw 12 characters",
        "saw 2 characters",
    ]
    (transcript,) = read_transcripts(tmp_path / "wire")
    received = [line.decode() for line in sent.splitlines()]
    # Each direction in order (the two interleave as the processes are scheduled).
    assert [line.text for line in transcript.lines if line.sender == "client"] == received
    assert [line.text for line in transcript.lines if line.sender == "server"] == [
        "echo " + text for text in received
    ]
    assert transcript.stderr == run.stderr.decode()
    assert transcript.status == 3
    assert transcript.lines[0].message == {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def test_a_signal_reaches_the_server_and_its_end_is_recorded(tmp_path: Path) -> None:
    process = subprocess.Popen(
        relay(tmp_path, SLEEPER),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=base_environment(),
        cwd=REPO_ROOT,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM
        assert time.monotonic() - started < RUN_TIMEOUT_S
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    (transcript,) = read_transcripts(tmp_path / "wire")
    assert [line.text for line in transcript.lines] == ["ready"]
    assert transcript.status == 128 + signal.SIGTERM
