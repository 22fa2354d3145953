#!/usr/bin/env bash
# The real peer of the KV tests: stock `wrk` (Debian's; it runs the Lua
# scripts in scripts/kv/). Idempotent: apt-get only when it is missing.
set -euo pipefail

if ! command -v wrk >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends wrk
fi
