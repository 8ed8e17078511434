#!/usr/bin/env bash
# Checks the Nix files on a machine without a Nix store, binary cache or network.
#
#   1. Every .nix file parses (`nix-instantiate --parse`); without `with`, this also catches
#      every undefined name.
#   2. The pure data files evaluate to JSON in restricted mode, with nothing on the search path
#      but nix/ itself: they cannot reach nixpkgs or any other file. nix/module.nix is
#      evaluated too, against a stub of nixpkgs' lib (nix/checks/module-eval.nix) whose types
#      check the defaults and the values of a full deployment.
#   3. flake.lock is a lock file of version 7 whose only input is a pinned nixpkgs.
#   4. The socket unit and the template service that the module defines are rendered into unit
#      files, and `systemd-analyze security --offline=yes` scores the service: the check fails
#      on any parse warning and above an exposure of 1.0 without network. The sandbox must
#      also let the server reach its audit destination (the journal's socket, or a file in its
#      logs directory) and call openat2 (nix/checks/sandbox-allows.py).
#   5. With --python, the server validates the environment that the module renders
#      (`--check-config`), so that the module's values are values the server accepts.
#
# Usage: scripts/check-nix-offline.sh [--python PYTHON]
# Needs nix-instantiate (Debian: nix-bin), systemd-analyze and python3; installs nothing.
set -euo pipefail

readonly MAX_EXPOSURE="1.0"

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

python_under_test=""
while (($# > 0)); do
  case "$1" in
    --python)
      python_under_test="${2:?--python needs an interpreter}"
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "check-nix-offline: unknown argument: $1" >&2
      exit 2
      ;;
  esac
done

require() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "check-nix-offline: '$1' is required but not installed ($2)" >&2
    exit 2
  fi
}
require nix-instantiate "Debian: apt-get install nix-bin"
require systemd-analyze "part of systemd"
require python3 "Python 3.11 or newer"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/check-nix-offline.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# No daemon, no store writes and no search path: nothing here may need more than the files.
nix_eval() {
  env -u NIX_PATH nix-instantiate --store dummy:// --option restrict-eval true \
    -I "nix=$root/nix" --eval --strict --json "$@"
}

echo "== 1. parse every .nix file"
mapfile -t nix_files < <(
  cd "$root" &&
    find . \( -name .git -o -name .cache -o -name .direnv -o -name node_modules \
      -o -name 'result*' \) -prune -o -type f -name '*.nix' -print | sort
)
if ((${#nix_files[@]} == 0)); then
  echo "check-nix-offline: no .nix files found under $root" >&2
  exit 1
fi
parse_failures=0
for file in "${nix_files[@]}"; do
  if ! nix-instantiate --store dummy:// --parse "$root/$file" >/dev/null; then
    echo "FAIL parse: $file" >&2
    parse_failures=$((parse_failures + 1))
  fi
done
if ((parse_failures > 0)); then
  echo "check-nix-offline: $parse_failures of ${#nix_files[@]} .nix files do not parse" >&2
  exit 1
fi
echo "${#nix_files[@]} files parse"

echo "== 2. evaluate the pure data files without nixpkgs"
nix_eval --expr 'import <nix/hardening.nix> { }' >"$work/hardening.json"
nix_eval --expr 'import <nix/hardening.nix> { databaseAddresses = [ "192.0.2.10/32" ]; }' \
  >"$work/hardening-tcp.json"
nix_eval --expr 'import <nix/image-config.nix>' >"$work/image-config.json"
nix_eval --expr 'import <nix/units.nix> { }' >"$work/units.json"
sample='{ A = true; B = [ "x" "y" ]; C = 0.5; D = null; }'
nix_eval --expr "import <nix/environment.nix> { settings = $sample; }" >"$work/environment.json"
# The module itself, against a stub of nixpkgs' lib whose types check every value: the
# defaults alone, a full deployment (a DSN credential, a data directory, settings off their
# defaults), the same with TCP to the database, and with the audit trail in a file.
nix_eval --expr 'import <nix/checks/module-eval.nix> { values = { enable = true; }; }' \
  >"$work/module-defaults.json"
deployment='{
  enable = true;
  dsnFile = "/var/lib/mcp-secrets/dsn";
  settings = {
    MCP_SAFE_DATA_DIR = "/srv/mcp-data";
    MCP_FS_CROSS_MOUNTS = true;
    MCP_SQL_SCHEMAS = [ "public" "reporting" ];
    MCP_SQL_ALLOWED_FUNCTIONS = [ "reporting.safe_total" ];
    MCP_SQL_MAX_RESULT_BYTES = 65536;
    MCP_METRICS_CPU_SAMPLE_SECONDS = 0.25;
    MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS = 0;
    MCP_SERVER_SUITE_LOG_LEVEL = "INFO";
    MCP_AUDIT_ARGUMENTS = "full";
    MCP_AUDIT_REQUIRED = true;
  };
}'
nix_eval --expr "import <nix/checks/module-eval.nix> { values = $deployment; }" >"$work/module.json"
tcp='{ databaseAddresses = [ "192.0.2.10/32" ]; }'
nix_eval --expr "import <nix/checks/module-eval.nix> { values = $deployment // $tcp; }" \
  >"$work/module-tcp.json"
# The audit trail in a file instead of the journal: the module adds the logs directory.
audit_file='{ settings.MCP_AUDIT_LOG = "/var/log/mcp-server-suite/audit.jsonl"; }'
nix_eval --expr "import <nix/checks/module-eval.nix> {
  values = $deployment // { settings = ($deployment).settings // ($audit_file).settings; };
}" >"$work/module-audit-file.json"
python3 - "$work"/*.json <<'PY'
import json
import pathlib
import sys

for path in map(pathlib.Path, sys.argv[1:]):
    print(f"{path.name}: {len(json.loads(path.read_text(encoding='utf-8')))} keys")
PY
python3 - "$work/environment.json" "$root/nix/hardening.nix" <<'PY'
import json
import re
import sys

rendered = json.load(open(sys.argv[1], encoding="utf-8"))
wanted = {"A": "true", "B": "x,y", "C": "0.5"}
if rendered != wanted:
    sys.exit(f"environment.nix renders {rendered}, expected {wanted}")
# The directives of the sandbox, in the order the file lists them: they must be alphabetical,
# so that a reviewer finds each one where it belongs.
text = open(sys.argv[2], encoding="utf-8").read()
directives = re.findall(r"^  ([A-Z][A-Za-z]*) =", text.split("\nin\n", 1)[1], re.M)
if directives != sorted(directives):
    sys.exit(f"hardening.nix does not list its directives alphabetically: {directives}")
print(f"hardening.nix lists its {len(directives)} directives alphabetically")
PY

echo "== 3. flake.lock"
python3 - "$root/flake.lock" <<'PY'
import json
import re
import sys

lock = json.load(open(sys.argv[1], encoding="utf-8"))
problems = []
if lock.get("version") != 7:
    problems.append(f"version is {lock.get('version')!r}, expected 7")
nodes = lock.get("nodes", {})
root = nodes.get(lock.get("root", ""), {})
if set(root.get("inputs", {})) != {"nixpkgs"}:
    problems.append(f"root inputs are {sorted(root.get('inputs', {}))}, expected nixpkgs only")
locked = nodes.get("nixpkgs", {}).get("locked", {})
original = nodes.get("nixpkgs", {}).get("original", {})
checks = {
    "type": locked.get("type") == "github" and original.get("type") == "github",
    "owner/repo": (locked.get("owner"), locked.get("repo")) == ("NixOS", "nixpkgs"),
    "rev": re.fullmatch(r"[0-9a-f]{40}", str(locked.get("rev", ""))),
    "narHash": re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", str(locked.get("narHash", ""))),
    "lastModified": isinstance(locked.get("lastModified"), int),
    "ref": isinstance(original.get("ref"), str),
}
problems += [f"nixpkgs {name} is missing or malformed" for name, ok in checks.items() if not ok]
if problems:
    sys.exit("flake.lock: " + "; ".join(problems))
print(f"nixpkgs {original['ref']} at {locked['rev']}")
PY

# Renders one variant, scores its service and prints the score; fails on parse warnings.
score() {
  local name="$1" units="$2" out="$work/$1"
  python3 "$root/scripts/render-units.py" --units "$units" --out "$out" >/dev/null
  local report="$out/security.txt" warnings="$out/warnings.txt"
  systemd-analyze security --offline=yes --no-pager "$out/mcp-server-suite@.service" \
    >"$report" 2>"$warnings"
  # systemd-analyze only warns about unknown keys and bad values, then ignores them.
  if grep -F "$out/" "$warnings" >&2; then
    echo "check-nix-offline: systemd does not accept the $name units as written" >&2
    exit 1
  fi
  sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$report"
}

echo "== 4. systemd-analyze security of the template service the module defines"
exposure="$(score isolated "$work/module.json")"
exposure_tcp="$(score tcp "$work/module-tcp.json")"
exposure_audit_file="$(score audit-file "$work/module-audit-file.json")"
exposure_defaults="$(score defaults "$work/module-defaults.json")"
if [[ -z "$exposure" || -z "$exposure_tcp" || -z "$exposure_audit_file" ||
  -z "$exposure_defaults" ]]; then
  echo "check-nix-offline: no exposure level in the systemd-analyze report" >&2
  cat "$work/isolated/security.txt" >&2
  exit 1
fi
echo "exposure without network: $exposure (target <= $MAX_EXPOSURE)"
echo "exposure with TCP to the database: $exposure_tcp (reported only)"
echo "exposure with the audit trail in a file: $exposure_audit_file (target <= $MAX_EXPOSURE)"
echo "exposure with every default: $exposure_defaults (target <= $MAX_EXPOSURE)"
for variant in isolated audit-file defaults; do
  level="$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' \
    "$work/$variant/security.txt")"
  if ! python3 -c 'import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))' \
    "$level" "$MAX_EXPOSURE"; then
    echo "check-nix-offline: exposure $level of the $variant units is above $MAX_EXPOSURE" >&2
    grep -F '✗' "$work/$variant/security.txt" >&2 || true
    exit 1
  fi
done
# The server must reach what it writes to: the journal's socket by default, or its audit file.
for variant in module-defaults module module-tcp module-audit-file; do
  python3 "$root/nix/checks/sandbox-allows.py" --units "$work/$variant.json"
done

echo "== 5. the server accepts the environment the module renders"
if [[ -z "$python_under_test" ]]; then
  echo "skipped: no --python given"
else
  # The host paths of the deployment stand in for local ones; every other value is as
  # rendered. The DSN is left out: with SQL configured, --check-config may connect to the
  # database to audit the role, and there is no database where this runs. The server opens
  # its audit destination at start-up, the journal included; where journald does not run (a
  # container), the journal is checked as stderr, and the VM test checks it for real. A
  # PYTHONPATH (the dev shell's, which puts src/ on it) is passed on; nothing else of this
  # environment is.
  journal_socket=/run/systemd/journal/socket
  if [[ ! -S "$journal_socket" ]]; then
    echo "no journal at $journal_socket: MCP_AUDIT_LOG=journal is checked as stderr"
  fi
  mkdir -p "$work/data" "$work/logs"
  for variant in module-defaults module module-audit-file; do
    mapfile -t assignments < <(
      python3 -c 'import json, os, pathlib, stat, sys
environment = json.load(open(sys.argv[1]))["environment"]
environment.pop("MCP_SQL_DSN_FILE", None)
if "MCP_SAFE_DATA_DIR" in environment:
    environment["MCP_SAFE_DATA_DIR"] = sys.argv[2]
destination = environment.get("MCP_AUDIT_LOG", "")
if destination.startswith("/"):
    name = pathlib.PurePosixPath(destination).name
    environment["MCP_AUDIT_LOG"] = str(pathlib.Path(sys.argv[3], name))
elif destination == "journal":
    try:
        listening = stat.S_ISSOCK(os.stat(sys.argv[4]).st_mode)
    except OSError:
        listening = False
    if not listening:
        environment["MCP_AUDIT_LOG"] = "stderr"
for name, value in sorted(environment.items()):
    print(f"{name}={value}")' "$work/$variant.json" "$work/data" "$work/logs" "$journal_socket"
    )
    env -i PATH="$PATH" HOME="$work" ${PYTHONPATH:+PYTHONPATH="$PYTHONPATH"} \
      "${assignments[@]}" "$python_under_test" -m mcp_server_suite --check-config
    echo "--check-config accepts the ${#assignments[@]} variables of $variant.json"
  done
fi

echo "check-nix-offline: all checks passed"
