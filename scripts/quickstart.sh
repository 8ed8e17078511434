#!/usr/bin/env bash
# Starts the server from a fresh clone, holds one short session with it and says what the
# session showed: the tools offered, a metrics reading, a file read from the example sandbox
# and a path traversal attempt, refused in-band. It ends with a client configuration for this
# clone. Needs only Python 3.11 or newer: without uv, a pinned uv is fetched from PyPI into
# .cache/ (scripts/bootstrap-uv.py). Arguments go to scripts/quickstart-session.py (--raw).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_uv.sh
ensure_uv

# The server and its runtime dependencies only, as the lock pins them. --inexact keeps what a
# development environment added to the same directory (scripts/test.sh installs the test
# tools there).
export UV_PROJECT_ENVIRONMENT="${UV_PROJECT_ENVIRONMENT:-.cache/venv}"
echo "Installing the server and its runtime dependencies into $UV_PROJECT_ENVIRONMENT" >&2
uv sync --locked --quiet --no-dev --inexact --extra binary

exec "$UV_PROJECT_ENVIRONMENT/bin/python" scripts/quickstart-session.py "$@" \
  -- "$UV_PROJECT_ENVIRONMENT/bin/mcp-server-suite"
