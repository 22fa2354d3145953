#!/usr/bin/env bash
# Smoke load of the KV API with stock wrk and the repo's Lua scripts:
# starts NODES release `tidegate serve` nodes (KV only, loopback, a fresh
# temporary data directory each), PUTs 1 KiB values for DURATION, then
# GETs the written ids for DURATION, through the first node, and stops the
# nodes. Closed-model (wrk sends as fast as it can): for comparisons
# within one run, not latency claims.
#
# Usage: scripts/kv/wrk.sh [NODES=1] [DURATION=10s] [CONNS=64] [QUERY=""] [SYNC=interval_ms:1000]
#   e.g. scripts/kv/wrk.sh 3 10s 64 "&ack=2&from=3"
set -euo pipefail
cd "$(dirname "$0")/../.."

nodes=${1:-1}
duration=${2:-10s}
conns=${3:-64}
query=${4:-}
sync=${5:-interval_ms:1000}
threads=2
base_port=${KV_WRK_BASE_PORT:-18180}

# shellcheck source=cluster.sh
source scripts/kv/cluster.sh
kv_cluster_begin "$base_port" "$nodes" wrk-smoke "sync = \"$sync\""
kv_start_nodes

target="http://127.0.0.1:$base_port"
echo "== PUT: $nodes node(s), $conns connections, $duration, query '$query', sync $sync"
wrk -t$threads -c"$conns" -d"$duration" -s scripts/kv/put.lua "$target" -- $threads "$query" | tee "$work/put.txt"
least=$(sed -n 's/^kv put: requests sent per thread (least) //p' "$work/put.txt")
written=$(( (least > conns ? least - conns : 0) * threads ))
if [ "$written" -le 0 ]; then
  echo "too few PUTs to GET anything" >&2
  exit 1
fi
echo "== GET over $written ids"
wrk -t$threads -c"$conns" -d"$duration" -s scripts/kv/get.lua "$target" -- "$written" "$query"
