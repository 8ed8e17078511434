#!/usr/bin/env bash
# Smoke-tests the loaded OCI image (`nix build .#image && docker load < result`):
#
#   - the image configuration and every layer: UID/GID 10001, the environment, the stop signal,
#     and no shell, coreutils, package manager or setuid file, inside /nix/store too
#     (nix/checks/inspect-image.py on `docker save`);
#   - inside a container run with the hardening flags: the UID, a read-only root file system
#     and store, a writable tmpfs /tmp, no importable pip, and no way to start /bin/sh;
#   - an MCP handshake and tool calls through `docker run -i` and through Compose;
#   - a clean `docker stop`: exit code 0 within the grace period.
#
# With --offline it needs no daemon: it checks docker-compose.yml against the hardening
# profile and nix/image-config.nix, then runs scripts/check-nix-offline.sh, passing on any
# further arguments (such as --python).
#
# Usage: scripts/smoke-image.sh [--offline [check-nix-offline arguments]]
# Needs python3 and nix-instantiate, and for the online checks docker with its Compose plugin.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

offline=false
case "${1:-}" in
  --offline)
    offline=true
    shift
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  "") ;;
  *)
    echo "smoke-image: unknown argument: $1" >&2
    exit 2
    ;;
esac

require() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "smoke-image: '$1' is required but not installed ($2)" >&2
    exit 2
  fi
}
require python3 "Python 3.11 or newer"
require nix-instantiate "Nix; on Debian: apt-get install nix-bin"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/smoke-image.XXXXXX")"
cleanups=()
cleanup() {
  local command
  for command in "${cleanups[@]}"; do
    eval "$command" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "smoke-image: FAIL: $*" >&2
  exit 1
}

# The values the image is built from; every expectation below comes from them.
expect="$work/image-config.json"
env -u NIX_PATH nix-instantiate --store dummy:// --option restrict-eval true \
  -I "nix=$root/nix" --eval --strict --json --expr 'import <nix/image-config.nix>' >"$expect"
config() {
  python3 -c 'import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2].split("."):
    value = value[key]
print(value)' "$expect" "$1"
}

if [[ "$offline" == true ]]; then
  echo "== Compose file"
  python3 "$root/scripts/check-compose.py" --expect "$expect" "$root/docker-compose.yml"
  if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
    # Compose validates the file itself; this needs the CLI plugin, not the daemon.
    docker compose -f "$root/docker-compose.yml" config --quiet
    echo "docker compose config accepts the file"
  else
    echo "docker compose is not installed: skipped its own validation"
  fi
  echo "== Nix files"
  bash "$root/scripts/check-nix-offline.sh" "$@"
  echo "smoke-image --offline: all checks passed"
  exit 0
fi

if (($# > 0)); then
  echo "smoke-image: arguments are only taken with --offline" >&2
  exit 2
fi
require docker "Docker Engine with the Compose plugin"
docker info >/dev/null 2>&1 || fail "the Docker daemon is not reachable"
docker compose version >/dev/null 2>&1 || fail "the Docker Compose plugin is not installed"

image="$(config name):$(config tag)"
uid="$(config user.uid)"
gid="$(config user.gid)"
data_dir="$(config dataDir)"
docker image inspect "$image" >/dev/null 2>&1 ||
  fail "image $image is not loaded; run: nix build .#image && docker load < result"

# The hardening flags of the container deployment.
hardening=(
  --read-only
  --cap-drop ALL
  --security-opt no-new-privileges:true
  --network none
  --tmpfs "/tmp:rw,noexec,nosuid,nodev,size=16m"
  --pids-limit 64 --memory 256m --cpus 1
)

echo "== 1. image configuration and layers"
docker save "$image" -o "$work/image.tar"
python3 "$root/nix/checks/inspect-image.py" --expect "$expect" "$work/image.tar"

echo "== 2. inside a hardened container"
entrypoint="$(docker image inspect -f '{{index .Config.Entrypoint 0}}' "$image")"
mkdir -m 0755 "$work/data"
printf 'hello from the sandbox\n' >"$work/data/hello.txt"
chmod 0644 "$work/data/hello.txt"
probe='
import errno, importlib.util, os, re, stat, sys

uid, gid, data_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
problems = []
if (os.getuid(), os.getgid()) != (uid, gid):
    problems.append(f"runs as {os.getuid()}:{os.getgid()}, not {uid}:{gid}")
for path in ("/probe", "/etc/probe", sys.prefix + "/probe", data_dir + "/probe"):
    try:
        with open(path, "x"):
            pass
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES):
            problems.append(f"{path}: unexpected {error!r}")
    else:
        problems.append(f"{path} is writable")
with open("/tmp/probe", "w") as handle:
    handle.write("tmpfs")
os.remove("/tmp/probe")
for module in ("pip", "ensurepip"):
    if importlib.util.find_spec(module) is not None:
        problems.append(f"the module {module} is importable")
forbidden = {"sh", "bash", "dash", "ash", "zsh", "busybox", "toybox", "coreutils", "ls", "cat",
             "env", "apt", "apt-get", "dpkg", "apk", "rpm", "yum", "dnf", "nix", "uv"}
walked = 0
for top in ("/bin", "/sbin", "/usr", "/lib", "/opt", "/etc", "/nix"):
    for directory, _, files in os.walk(top):
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            walked += 1
            if mode & (stat.S_ISUID | stat.S_ISGID):
                problems.append(f"setuid or setgid: {path}")
            if os.path.basename(directory) in ("bin", "sbin") and (
                name in forbidden or re.fullmatch(r"pip[0-9.]*", name)
            ):
                problems.append(f"forbidden program: {path}")
for problem in problems:
    print(problem, file=sys.stderr)
print(f"{walked} files walked, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
'
docker run --rm "${hardening[@]}" -v "$work/data:$data_dir:ro" --entrypoint "$entrypoint" \
  "$image" -c "$probe" "$uid" "$gid" "$data_dir" ||
  fail "the container probe found problems"
if docker run --rm "${hardening[@]}" --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1; then
  fail "/bin/sh runs in the image"
fi
echo "/bin/sh cannot be started"

# One session: the handshake, then a call of each tool that needs no database.
cat >"$work/requests.jsonl" <<'JSON'
{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"smoke","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"system_metrics","arguments":{"include_disk":true}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sandbox_fs_read","arguments":{"relative_path":"hello.txt"}}}
JSON

# Checks the replies of one session; the file read is checked only where the data is mounted.
verify_session() {
  python3 - "$1" "$2" <<'PY'
import json
import sys

path, expect_file = sys.argv[1], sys.argv[2] == "with-file"
replies = {}
for line in open(path, encoding="ascii"):
    if line.strip():
        reply = json.loads(line)
        replies[reply.get("id")] = reply
problems = []
init = replies.get(1, {}).get("result", {})
server = init.get("serverInfo", {}).get("name")
if init.get("protocolVersion") != "2025-11-25" or server != "mcp-server-suite":
    problems.append(f"initialize: {replies.get(1)!r}")
tools = {tool["name"] for tool in replies.get(2, {}).get("result", {}).get("tools", [])}
if not {"sandbox_fs_read", "system_metrics"} <= tools:
    problems.append(f"tools/list: {sorted(tools)}")
metrics = replies.get(3, {}).get("result", {})
memory = metrics.get("structuredContent", {}).get("memory", {})
if metrics.get("isError") is not False or memory.get("total_bytes", 0) <= 0:
    problems.append(f"system_metrics: {replies.get(3)!r}")
if expect_file:
    read = replies.get(4, {}).get("result", {})
    content = read.get("structuredContent", {}).get("content")
    if read.get("isError") is not False or content != "hello from the sandbox\n":
        problems.append(f"sandbox_fs_read: {replies.get(4)!r}")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(replies)} replies as expected")
PY
}

echo "== 3. MCP session through docker run -i"
timeout 120 docker run --rm -i "${hardening[@]}" -v "$work/data:$data_dir:ro" "$image" \
  <"$work/requests.jsonl" >"$work/run.jsonl" || fail "docker run -i exited with $?"
verify_session "$work/run.jsonl" with-file

echo "== 4. MCP session through Compose"
project="mcp-smoke-$$"
compose=(docker compose -p "$project" -f "$root/docker-compose.yml")
printf -v down '%q ' "${compose[@]}" down --volumes --remove-orphans
cleanups+=("$down")
timeout 120 "${compose[@]}" run --rm -T mcp-server <"$work/requests.jsonl" >"$work/compose.jsonl" ||
  fail "docker compose run exited with $?"
# The Compose volume starts empty: the file read is answered, but not with the file.
verify_session "$work/compose.jsonl" without-file

echo "== 5. clean docker stop"
container="$(docker run -d -i "${hardening[@]}" "$image")"
printf -v remove '%q ' docker rm -f "$container"
cleanups+=("$remove")
for _ in $(seq 50); do
  [[ "$(docker inspect -f '{{.State.Running}}' "$container")" == true ]] && break
  sleep 0.1
done
started=$SECONDS
docker stop --time 10 "$container" >/dev/null
elapsed=$((SECONDS - started))
exit_code="$(docker inspect -f '{{.State.ExitCode}}' "$container")"
[[ "$exit_code" == 0 ]] || fail "the server exited with $exit_code after docker stop"
((elapsed < 10)) || fail "docker stop took ${elapsed}s: the grace period ran out"
echo "stopped with exit code 0 in ${elapsed}s"

echo "smoke-image: all checks passed for $image"
