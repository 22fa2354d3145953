#!/usr/bin/env bash
# What anti-entropy streams while clients write: starts 3 release
# `tidegate serve` nodes on loopback (fresh temporary data directories,
# anti_entropy_interval_ms = INTERVAL_MS), PUTs 1 KiB values with stock wrk
# (scripts/kv/put.lua, ack=3&from=3, so every replica has every write and
# there is nothing to repair) for DURATION through node 0, and prints each
# node's anti-entropy counters: ranges found different and keys "repaired"
# are then pure overhead. Prints the client PUT rate as the anchor. Fails
# when no exchange completed.
#
# Usage: scripts/kv/anti_entropy_under_load.sh [DURATION=20s] [INTERVAL_MS=2000]
#   TIDEGATE_EXE=path  run that binary instead of building
set -euo pipefail
cd "$(dirname "$0")/../.."

duration=${1:-20s}
interval=${2:-2000}
base_port=${KV_AE_BASE_PORT:-18390}
# shellcheck source=cluster.sh
source scripts/kv/cluster.sh
kv_cluster_begin "$base_port" 3 anti-entropy-bench "anti_entropy_interval_ms = $interval"
kv_start_nodes
echo "== PUT 1 KiB, ack=3&from=3, $duration, 64 connections, anti_entropy_interval_ms = $interval"
wrk -t2 -c64 -d"$duration" -s scripts/kv/put.lua "http://127.0.0.1:$base_port" -- 2 "&ack=3&from=3" |
  grep -E "Requests/sec|requests in"
exchanges=0
for i in 0 1 2; do
  m=$(curl -s "http://127.0.0.1:$((base_port + i))/metrics" | grep -E "^tidegate_kv_ae_")
  echo "-- node $i"
  echo "$m"
  exchanges=$((exchanges + $(echo "$m" | sed -n 's/^tidegate_kv_ae_exchanges_total //p' | cut -d. -f1)))
done
if [ "$exchanges" -eq 0 ]; then
  echo "no anti-entropy exchange completed" >&2
  exit 1
fi
