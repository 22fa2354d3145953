#!/usr/bin/env bash
# Tidegate's half of a same-run comparison with the seed's own highload-dht
# service: the seed harness (kept beside its build, not in this repository)
# drives that service with stock wrk and its own Lua scripts; this runs the
# identical wrk commands, with the same scripts, against NODES local
# Tidegate nodes (KV only, default sync) and prints a row in the same
# columns. Every request goes to the first node.
#
#   PUT: a 5 s warm-up run, then a 15 s measured run; put.lua sends 1 KiB
#        to keys that never repeat and records how many were surely written
#   GET: the same for get.lua, random keys among those written; then an
#        untimed status.lua pass that counts answers by status
#
# Usage: scripts/kv/seed_harness_case.sh LUA_DIR NODES QUERY LABEL
#   e.g. scripts/kv/seed_harness_case.sh ~/anchors/dht-seed 3 "&ack=2&from=3" "tidegate 3 nodes"
# TIDEGATE_EXE picks the binary (default: a fresh release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
lua=${1:?"LUA_DIR: the folder of the harness put.lua, get.lua and status.lua"}
nodes=${2:?NODES}
query=${3-}
label=${4:-"tidegate $nodes node(s)"}
warm=5 dur=15 threads=2 conns=64
base_port=${KV_SEED_CASE_BASE_PORT:-19401}
for s in put.lua get.lua status.lua; do
  [ -f "$lua/$s" ] || { echo "no $s in $lua" >&2; exit 2; }
done

# shellcheck source=cluster.sh
source scripts/kv/cluster.sh
kv_cluster_begin "$base_port" "$nodes" seed-harness-case
kv_start_nodes
url="http://127.0.0.1:$base_port"
state=$work/keys
echo 0 > "$state"
run() {  # OUT SECONDS SCRIPT ARGS...
  local out=$1 d=$2 script=$3
  shift 3
  timeout $((d + 60)) wrk -t$threads -c$conns -d"${d}s" --latency -s "$lua/$script" "$url" -- "$@" > "$out" 2>&1
}
run "$work/put.warm" $warm put.lua "$query" "$(cat "$state")" $threads "$state" $conns
run "$work/put" $dur put.lua "$query" "$(cat "$state")" $threads "$state" $conns
keys=$(cat "$state")
size=$(du -sm "$work" | cut -f1)
run "$work/get.warm" $warm get.lua "$query" "$state"
run "$work/get" $dur get.lua "$query" "$state"
run "$work/status" $warm status.lua "$query" "$state"
statuses=$(grep '^statuses' "$work/status" | cut -d' ' -f2- || true)

row() {  # LABEL WRK_OUTPUT NOTE: req/s, avg, p50, p90, p99, max (ms), requests, non-2xx, socket errors
  awk -v label="$1" -v note="$3" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v + 0 }
    /^ +Latency +[0-9]/ && !seen { avg = ms($2); max = ms($4); seen = 1 }
    /^ +50% / { p50 = ms($2) } /^ +90% / { p90 = ms($2) } /^ +99% / { p99 = ms($2) }
    /^Requests\/sec:/ { rps = $2 }
    /requests in/ { total = $1 }
    /Non-2xx or 3xx responses:/ { bad = $5 }
    /Socket errors:/ { err = $0; sub(/.*Socket errors: /, "", err) }
    END { printf "| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.2f | %d | %d | %s | %s |\n",
                 label, rps, avg, p50, p90, p99, max, total, bad, (err == "" ? "0" : err), note }' "$2"
}
echo "| case | req/s | avg ms | p50 ms | p90 ms | p99 ms | max ms | requests | non-2xx | socket errors | note |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row "$label: PUT 1 KiB" "$work/put" ""
row "$label: GET" "$work/get" "$keys keys written, ${size} MB on disk (all nodes) before GET; status pass: ${statuses:-?}"
