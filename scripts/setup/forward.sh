#!/usr/bin/env bash
# Real peers for crates/forward's tests: the stock `fluent-logger` Python
# client (PyPI). Idempotent and fast when already installed.
set -euo pipefail

PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  if ! dpkg -s python3 >/dev/null 2>&1; then
    apt-get update
  fi
  apt-get install -y --no-install-recommends python3 python3-pip
fi
if "$PY" -c 'import fluent.sender, msgpack' >/dev/null 2>&1; then
  exit 0
fi
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  apt-get update
  apt-get install -y --no-install-recommends python3-pip
fi
"$PY" -m pip install --quiet 'fluent-logger==0.11.1' \
  || "$PY" -m pip install --quiet --break-system-packages 'fluent-logger==0.11.1'
"$PY" -c 'import fluent.sender, msgpack'
