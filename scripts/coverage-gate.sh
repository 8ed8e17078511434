#!/usr/bin/env bash
# Fails unless tools/sql/ and tools/fs/ (every module), every module of guardrails/ and of
# audit/, the protocol core without I/O and the error taxonomy have 100% branch coverage in
# the data of the last test run, and names
# each file that falls short with its missing lines and branches. The rules are in
# scripts/_coverage_gate.py.
#
# Usage:
#   scripts/coverage-gate.sh [--data-file FILE] [--rcfile FILE]
#
# Run it after pytest. It reads the coverage configuration in pyproject.toml (the data file is
# .cache/coverage/.coverage) under $PYTHON, else the project's .cache/venv/bin/python, else
# python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git rev-parse --show-toplevel)
cd "$root"

python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x .cache/venv/bin/python ]]; then
    python=.cache/venv/bin/python
  else
    python=python3
  fi
fi

exec "$python" "$here/_coverage_gate.py" "$@"
