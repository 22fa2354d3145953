#!/usr/bin/env bash
# Real peers for crates/push's tests: the stock npm `socket.io-client` and
# `engine.io-client` (pinned by crates/push/tests/js/package-lock.json,
# installed into crates/push/tests/js/node_modules) and the `python-socketio`
# client (PyPI). Idempotent and fast when already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get update
  apt-get install -y --no-install-recommends nodejs npm
fi
js=crates/push/tests/js
if [ ! -d "$js/node_modules/socket.io-client" ] || [ ! -d "$js/node_modules/engine.io-client" ] \
  || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
fi

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import socketio, requests, websocket' >/dev/null 2>&1; then
  pkgs=('python-socketio[client]==5.11.4' 'requests' 'websocket-client')
  "$PY" -m pip install --quiet "${pkgs[@]}" \
    || "$PY" -m pip install --quiet --break-system-packages "${pkgs[@]}"
fi
"$PY" -c 'import socketio, requests, websocket'
