#!/usr/bin/env bash
# Starts the server from a fresh clone and holds one short session with it: the handshake,
# the tool list, a metrics reading and a sandboxed file read. It shows a newcomer the server
# works; an MCP client does the same over the same pipes.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet --user uv
  PATH="$(python3 -m site --user-base)/bin:$PATH"
fi
export UV_PROJECT_ENVIRONMENT="${UV_PROJECT_ENVIRONMENT:-.cache/venv}"
uv sync --locked --quiet --extra binary

# The embedded default sandbox: the repository's example data, read-only by design.
export MCP_SAFE_DATA_DIR="${MCP_SAFE_DATA_DIR:-$PWD/examples/data}"

printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"quickstart","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' \
  '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"system_metrics","arguments":{"include_disk":true}}}' \
  '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sandbox_fs_read","arguments":{"relative_path":"hello.txt"}}}' \
  '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sandbox_fs_read","arguments":{"relative_path":"../../etc/passwd"}}}' |
  uv run --locked --no-sync mcp-server-suite
