#!/usr/bin/env bash
# Installs the MCP Inspector, the second real client the interoperability tests drive, into
# .cache/inspector. Version 0.15 is the last that runs on Node.js 20. An install already in
# place at that version is kept, so repeated runs cost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly version="0.15.0"
readonly prefix=".cache/inspector"
readonly manifest="$prefix/node_modules/@modelcontextprotocol/inspector/package.json"

if ! command -v npm >/dev/null 2>&1; then
  echo "install-inspector: npm is required (Node.js 20 or newer)" >&2
  exit 2
fi
if [[ -f $manifest ]] && grep -q "\"version\": \"$version\"" "$manifest"; then
  exit 0
fi
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
  "@modelcontextprotocol/inspector@$version" >/dev/null
