#!/usr/bin/env bash
# How fast anti-entropy refills a node that lost its disk: starts 3 release
# `tidegate serve` nodes on loopback (fresh temporary data directories),
# PUTs 1 KiB values with stock wrk (scripts/kv/put.lua, ack=3&from=3) for
# DURATION through node 0, stops node 2, deletes its data directory,
# restarts it, and waits until its own data (the local-only range stream)
# equals node 0's. Prints the client PUT rate of the same run (the anchor),
# the refill time and node 2's anti-entropy counters. Fails when node 2 is
# not refilled within 300 s, or when nothing was written.
#
# Usage: scripts/kv/anti_entropy.sh [DURATION=20s]
#   TIDEGATE_EXE=path  run that binary instead of building
set -euo pipefail
cd "$(dirname "$0")/../.."

duration=${1:-20s}
base_port=${KV_AE_BASE_PORT:-18380}
# shellcheck source=cluster.sh
source scripts/kv/cluster.sh
export RUST_LOG=${RUST_LOG:-info}
kv_cluster_begin "$base_port" 3 anti-entropy-bench "anti_entropy_interval_ms = 60000"

local_bytes() { curl -s "http://127.0.0.1:$((base_port + $1))/v0/entities?start=k" | wc -c; }

kv_start_nodes
echo "== PUT 1 KiB, ack=3&from=3, $duration, 64 connections (anchor: the client write rate)"
wrk -t2 -c64 -d"$duration" -s scripts/kv/put.lua "http://127.0.0.1:$base_port" -- 2 "&ack=3&from=3" |
  grep -E "Requests/sec|requests in"
sleep 2
want=$(local_bytes 0)
if [ "$want" -le 0 ]; then
  echo "nothing was written" >&2
  exit 1
fi
echo "node 0 holds $want bytes of key\\nvalue ($(du -sh "$work/data0" | cut -f1) on disk)"

kv_stop_node 2
rm -rf "$work/data2"
t0=$(date +%s%N)
kv_start_node 2
while [ "$(local_bytes 2)" -lt "$want" ]; do
  if [ $(( ($(date +%s%N) - t0) / 1000000000 )) -ge 300 ]; then
    echo "node 2 not refilled within 300 s: $(local_bytes 2) of $want bytes" >&2
    exit 1
  fi
  sleep 0.2
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "== node 2 refilled ($want bytes) ${ms} ms after its restart (first pass 5 s after start)"
curl -s "http://127.0.0.1:$((base_port + 2))/metrics" | grep -E "^tidegate_kv_ae_"
grep -h "anti-entropy repaired" "$work/node2.log" || true
