#!/usr/bin/env bash
# The anchor of `tidegate bench push --anchor socketio`: the stock npm
# `socket.io` server, pinned by crates/bench/anchors/socketio/package-lock.json
# and installed into that folder's node_modules. Idempotent and fast when
# already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get update
  apt-get install -y --no-install-recommends nodejs npm
fi
dir=crates/bench/anchors/socketio
if [ ! -d "$dir/node_modules/socket.io" ] \
  || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
node -e 'require(process.argv[1] + "/node_modules/socket.io")' "$PWD/$dir"
