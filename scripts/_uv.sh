# Sourced by quickstart.sh and test.sh, from the top of the repository: puts a uv on PATH.
#
# An installed uv is used as it is. Otherwise a pinned uv is fetched from PyPI into
# .cache/uv-bootstrap/bin with nothing but the system Python (scripts/bootstrap-uv.py), once:
# later runs find it there. Debian 12 refuses `pip install --user` (PEP 668), so pip is never
# asked to install anything outside a virtual environment.

ensure_uv() {
  local bootstrap="$PWD/.cache/uv-bootstrap/bin"
  if command -v uv >/dev/null 2>&1; then
    return 0
  fi
  if [[ ! -x $bootstrap/uv ]]; then
    if ! command -v python3 >/dev/null 2>&1; then
      echo "$0: python3 is missing: install Python 3.11 or newer (Debian: apt-get install python3)" >&2
      exit 1
    fi
    python3 scripts/bootstrap-uv.py "$bootstrap" || exit 1
  fi
  PATH="$bootstrap:$PATH"
  # The fetched uv trusts the system's certificate store, as the Python download that fetched
  # it did, so a network whose TLS proxy is trusted system-wide works for both.
  export PATH UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-true}"
}
