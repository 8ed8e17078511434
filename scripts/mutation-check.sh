#!/usr/bin/env bash
# Runs the mutation table: each mutation disables one defence in a scratch copy of the tree,
# and the test module named for it must then fail. The working tree is never written to, and a
# mutation whose search text no longer matches exactly once fails the check. The rules are in
# scripts/_mutate.py; the mutations are in scripts/mutations.toml.
#
# Usage:
#   scripts/mutation-check.sh [--table FILE] [--jobs N] [--timeout SECONDS] [--list|--check] [ID...]
#
# --check only verifies that every mutation still applies, without running tests. The tests run
# under $PYTHON, else the project's .cache/venv/bin/python, else python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git rev-parse --show-toplevel)

python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $root/.cache/venv/bin/python ]]; then
    python=$root/.cache/venv/bin/python
  else
    python=python3
  fi
fi

table=$here/mutations.toml
args=()
while (($# > 0)); do
  case $1 in
    --table)
      if (($# < 2)); then
        echo "mutation-check: --table needs a file" >&2
        exit 2
      fi
      table=$2
      shift 2
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done

exec "$python" "$here/_mutate.py" --root "$root" --table "$table" --python "$python" \
  ${args[@]+"${args[@]}"}
