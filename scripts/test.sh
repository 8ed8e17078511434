#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: the locked environment, the MCP Inspector
# used as a second real client, then pytest with the coverage floor. Arguments go to pytest.
# PostgreSQL server binaries must be installed (Debian: `apt-get install postgresql`); the
# suite starts its own throwaway server on a Unix socket.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet --user uv
  PATH="$(python3 -m site --user-base)/bin:$PATH"
fi
export UV_PROJECT_ENVIRONMENT="${UV_PROJECT_ENVIRONMENT:-.cache/venv}"
uv sync --locked --quiet --extra binary
scripts/install-inspector.sh
exec uv run --locked --no-sync pytest "$@"
