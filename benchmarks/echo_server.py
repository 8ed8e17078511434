"""The floor for `bench_core.py`: a bare standard-library MCP server over stdio.

It reads one JSON message per line and answers `initialize`, `server/discover`, `ping`,
`tools/list` and `tools/call` with canned JSON, flushing after every response (the same
answers whichever protocol era a request speaks). There is no validation, no
concurrency and no tool work: whatever an MCP server does beyond this costs start-up time,
memory or throughput, which is what the benchmark puts next to it.

Run it as `python benchmarks/echo_server.py`; it exits at end of input.
"""

import json
import sys
from typing import Any, Final

__all__ = ["main"]

PROTOCOL_VERSION: Final = "2025-11-25"

_INITIALIZE: Final[dict[str, Any]] = {
    "protocolVersion": PROTOCOL_VERSION,
    "capabilities": {"tools": {"listChanged": False}},
    "serverInfo": {"name": "stdlib-echo", "version": "1"},
}
_DISCOVER: Final[dict[str, Any]] = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {"listChanged": False}},
    "ttlMs": 3_600_000,
    "cacheScope": "public",
}
_TOOLS: Final[dict[str, Any]] = {
    "tools": [
        {
            "name": "system_metrics",
            "description": "Canned metrics.",
            "inputSchema": {"type": "object", "properties": {}},
        }
    ]
}
_METRICS: Final[dict[str, Any]] = {
    "cpu": {"utilization_percent": 1.0, "core_count": 1, "load_average_1m": 0.0},
    "memory": {"total_bytes": 1, "available_bytes": 1, "percent_used": 0.0},
    "disk_percent_used": None,
    "timestamp_utc": "2026-01-01T00:00:00Z",
}
_CALL: Final[dict[str, Any]] = {
    "content": [{"type": "text", "text": json.dumps(_METRICS)}],
    "structuredContent": _METRICS,
    "isError": False,
}
_RESULTS: Final[dict[str, dict[str, Any]]] = {
    "initialize": _INITIALIZE,
    "server/discover": _DISCOVER,
    "ping": {},
    "tools/list": _TOOLS,
    "tools/call": _CALL,
}


def main() -> None:
    """Answer requests from stdin until it ends."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # notifications and client responses
        result = _RESULTS.get(message["method"])
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": "Method not found"}
        else:
            reply["result"] = result
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
