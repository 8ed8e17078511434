"""The naive comparison server for `bench_fs.py`: the MCP SDK's `MCPServer` with one tool.

`read_text_file(path)` reads a file below `BENCH_ROOT` the way a quick SDK server would:
resolve, check containment, read the whole file. It has none of the sandbox's controls
(no race-free walk, no file-type check, no byte cap); it exists only to measure what the
SDK's own server machinery costs per call.

Run it as `python benchmarks/sdk_fs_server.py` with `BENCH_ROOT` set; it speaks MCP over stdio.
"""

import os
from pathlib import Path

from mcp.server import MCPServer

__all__ = ["read_text_file", "server"]

ROOT = Path(os.environ.get("BENCH_ROOT", ".")).resolve()

server: MCPServer = MCPServer("sdk-fs-bench", log_level="WARNING")


@server.tool()
def read_text_file(path: str) -> str:
    """Read a UTF-8 text file, by path relative to the benchmark root.

    Args:
        path: The file, relative to `BENCH_ROOT`.

    Returns:
        The file's text.

    Raises:
        ValueError: The path resolves outside the root.
    """
    target = (ROOT / path).resolve()
    if not target.is_relative_to(ROOT):
        raise ValueError("path outside the root")
    return target.read_text("utf-8")


if __name__ == "__main__":
    server.run()
