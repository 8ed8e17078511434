#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against the
# stdio server, served over Streamable HTTP on 127.0.0.1 by the supergateway bridge, at the
# 2026-07-28 and 2025-11-25 requirement sets, and lists every check as pass, not applicable
# (with the reason, from tests/clients/conformance-not-applicable.json) or fail. It fails on
# any failing check and on a listed check that passed or never ran. A development check, not
# part of the test suite: scripts/_conformance.py says how it works.
#
# Usage:
#   scripts/check-conformance.sh [--requirements REVISION]... [--output DIR] [--wire DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-clients.sh
python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x .cache/venv/bin/python ]]; then
    python=.cache/venv/bin/python
  else
    python=python3
  fi
fi
exec "$python" scripts/_conformance.py "$@"
