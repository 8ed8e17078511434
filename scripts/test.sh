#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: the locked environment, the Node.js clients
# the interoperability tests drive, then pytest with the coverage floor. Arguments go to pytest.
# The suite starts its own throwaway PostgreSQL on a Unix socket from the server binaries
# (Debian: `apt-get install postgresql postgresql-contrib`).
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
uv sync --locked --quiet --extra binary

# The PostgreSQL programs, looked for exactly as the suite's fixture looks for them.
if ! pg_problem=$("$UV_PROJECT_ENVIRONMENT/bin/python" -c '
from tests.support.postgres import find_postgres_bindir
try:
    find_postgres_bindir()
except RuntimeError as exc:
    raise SystemExit(str(exc).partition(". Searched")[0]) from None
' 2>&1); then
  missing "$pg_problem"
fi

# PostgreSQL refuses to run as root, so as root the suite starts it as the postgres user
# through runuser, which Debian keeps in /usr/sbin: not on every user's PATH.
if [[ $(id -u) == 0 ]]; then
  if ! have runuser; then
    for sbin in /usr/sbin /sbin; do
      if [[ -f $sbin/runuser && -x $sbin/runuser ]]; then
        PATH="$PATH:$sbin"
        break
      fi
    done
    have runuser ||
      missing "runuser is missing (Debian: apt-get install util-linux); as root, the suite starts PostgreSQL as the postgres user with it"
  fi
  id -u postgres >/dev/null 2>&1 ||
    missing "there is no postgres user to start PostgreSQL as (Debian's postgresql package creates it), or run the suite as a user other than root"
fi

# The README's socket-activation client configuration is launched as pasted, through socat.
have socat ||
  missing "socat is missing (Debian: apt-get install socat); the client configuration tests connect through it"
export PATH
# --- End of prerequisites ----------------------------------------------------------------

# The real MCP clients (TypeScript client, Inspector 2.x and 0.15, Node.js 22): tests/clients.
scripts/install-clients.sh
exec uv run --locked --no-sync pytest "$@"
