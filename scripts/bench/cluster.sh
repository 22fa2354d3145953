#!/usr/bin/env bash
# Cluster mode's cost, measured against its anchor in the same command: the
# same `tidegate bench push` load (subscribers on /ws, 1 KB messages at a
# fixed rate) first against one node without [cluster] (single-node
# delivery), then with subscribers on node B and publishers on node A of a
# two-node cluster over a local Kafka broker (cross-node delivery through
# the backbone). Prints both latency summaries and the server CPU per 1,000
# delivered messages (both nodes together in the cluster run; the broker's
# own CPU beside it), from /proc.
#   bash scripts/bench/cluster.sh                       # the defaults below
#   bash scripts/bench/cluster.sh --publish-rate 2000   # any bench push argument (replaces its default)
#   CLUSTER_WARMUP=0 bash scripts/bench/cluster.sh      # measure a cold broker too
#   CLUSTER_EXTRA='linger_ms = 5' bash scripts/bench/cluster.sh   # more [cluster] keys
#   PROFILE_DIR=/tmp/prof bash scripts/bench/cluster.sh  # perf profile of node A too
#   PROFILE_NODE=B PROFILE_DELAY=5 ...                   # of node B instead, from 5 s into the run
#   CLUSTER_PARTITIONS=1 bash scripts/bench/cluster.sh   # backbone partitions (default 1, as [cluster])
#   PUSH_EXTRA='' bash scripts/bench/cluster.sh          # [push] keys of every node; by default
#       busy_write_delay_ms = 0: that hold depends on how loaded the machine is, and the
#       cluster run (broker, two nodes) loads it more than the single node, so it would
#       change the two sides differently and hide what the backbone itself costs
# Take the machine lock for it: flock /tmp/quiet.lock bash scripts/bench/cluster.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=kafka-broker.sh
source scripts/bench/kafka-broker.sh
kafka_bench_begin

# The default load; an argument given on the command line replaces the
# default of the same name (clap refuses an option given twice).
DEFAULTS=(--transport ws --users 50 --subs 20 --topics 1000 --msg-bytes 1024
          --publish-rate 5000 --messages 1000 --publishers 2 --drain-ms 5000)
LOAD=()
for ((i = 0; i < ${#DEFAULTS[@]}; i += 2)); do
    case " $* " in
        *" ${DEFAULTS[i]} "*) ;;
        *) LOAD+=("${DEFAULTS[i]}" "${DEFAULTS[i + 1]}") ;;
    esac
done
LOAD+=("$@")
PARTITIONS="${CLUSTER_PARTITIONS:-1}"
WORK="$(mktemp -d /tmp/tidegate-bench-cluster.XXXXXX)"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$WORK"
    kafka_stop
}
trap cleanup EXIT

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'
}

# start_node NAME PORT CLUSTER(0|1): sets NODE_PID.
start_node() {
    local name=$1 port=$2 cluster=$3 cfg="$WORK/$1.toml"
    cat > "$cfg" <<EOF
[http]
listen = "127.0.0.1:$port"
max_connections = 100000
[wire]
enabled = false
[sockperf]
enabled = false
[forward]
enabled = false
[s2s]
enabled = false
[push]
${PUSH_EXTRA-busy_write_delay_ms = 0}
EOF
    if [ "$cluster" = 1 ]; then
        cat >> "$cfg" <<EOF
[cluster]
backbone = "kafka"
brokers = "$KAFKA_BOOTSTRAP"
node = "$name"
partitions = $PARTITIONS
${CLUSTER_EXTRA:-}
EOF
    fi
    "$BIN" serve --config "$cfg" > "$WORK/$name.log" 2>&1 &
    NODE_PID=$!
    PIDS+=("$NODE_PID")
    local i
    for i in $(seq 1 300); do
        if curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then
            if [ "$cluster" = 0 ] || [ "$(metric "$port" tidegate_cluster_partitions)" = "$PARTITIONS" ]; then
                return 0
            fi
        fi
        sleep 0.1
    done
    cat "$WORK/$name.log" >&2
    echo "node $name did not come up" >&2
    return 1
}

echo "load: bench push ${LOAD[*]}"
echo "cluster: ${CLUSTER_EXTRA:-defaults}"

# 1. The anchor: one node, no cluster.
PS="$(kafka_free_port)"
start_node single "$PS" 0
S_PID=$NODE_PID
s0=$(ticks "$S_PID")
"$BIN" bench push --target "127.0.0.1:$PS" "${LOAD[@]}" --json > "$WORK/single.json"
s1=$(ticks "$S_PID")
kill "$S_PID"

# 2. Cross-node: subscribers on B, publishers on A.
PA="$(kafka_free_port)"
PB="$(kafka_free_port)"
start_node node-a "$PA" 1
A_PID=$NODE_PID
start_node node-b "$PB" 1
B_PID=$NODE_PID
# The readers resolve "the end of the backbone" on their first fetch: let a
# message cross before measuring.
for i in $(seq 1 50); do
    curl -s -X POST "http://127.0.0.1:$PA/v1/publish?topic=warm.up" -d '{}' >/dev/null
    sleep 0.2
    [ "$(metric "$PB" tidegate_cluster_received_total)" != "0" ] && break
done
# A fresh broker spends its first seconds compiling (JIT) at more than a
# core of this machine: one unmeasured pass of the same load first
# (CLUSTER_WARMUP=0 skips it), so the figures are of a warm broker, as in
# production.
if [ "${CLUSTER_WARMUP:-1}" != 0 ]; then
    "$BIN" bench push --target "127.0.0.1:$PB" --publish-target "127.0.0.1:$PA" "${LOAD[@]}" \
        --json > "$WORK/warmup.json"
fi
a0=$(ticks "$A_PID"); b0=$(ticks "$B_PID"); k0=$(ticks "$KAFKA_PID")
if [ -n "${PROFILE_DIR:-}" ]; then
    # PROFILE_DIR=dir: also record node A's (the publishing node's) profile,
    # or node B's (PROFILE_NODE=B, the subscribers' node).
    mkdir -p "$PROFILE_DIR"
    if [ "${PROFILE_NODE:-A}" = B ]; then PROF_PID=$B_PID; else PROF_PID=$A_PID; fi
    (sleep "${PROFILE_DELAY:-0}"
     perf record -F 499 -g -p "$PROF_PID" -o "$PROFILE_DIR/node-${PROFILE_NODE:-A}.perf.data" -- sleep 8) \
        > "$PROFILE_DIR/perf.log" 2>&1 &
fi
"$BIN" bench push --target "127.0.0.1:$PB" --publish-target "127.0.0.1:$PA" "${LOAD[@]}" --json \
    > "$WORK/cluster.json"
a1=$(ticks "$A_PID"); b1=$(ticks "$B_PID"); k1=$(ticks "$KAFKA_PID")

python3 - "$WORK/single.json" "$WORK/cluster.json" "$(getconf CLK_TCK)" \
    "$((s1 - s0))" "$((a1 - a0))" "$((b1 - b0))" "$((k1 - k0))" <<'PY'
import json, sys
single, cluster = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
hz = int(sys.argv[3])
s_t, a_t, b_t, k_t = (int(x) for x in sys.argv[4:8])
def row(name, r, cpu_ticks, extra=""):
    d = r["received"]
    if not d:
        sys.exit(f"{name}: nothing delivered; the run measured nothing")
    l = r["latency_us"]
    cpu_ms = cpu_ticks * 1000 / hz
    per_k = cpu_ms * 1000 / d
    print(f"{name:<12} delivered {d:>9,}  {r['rate']:>10,.0f} msg/s  "
          f"p50 {l['p50']/1000:7.2f} ms  p99 {l['p99']/1000:7.2f} ms  p99.9 {l['p999']/1000:7.2f} ms  "
          f"max {l['max']/1000:8.2f} ms  server CPU {cpu_ms/1000:6.2f} s = {per_k:6.2f} ms per 1,000 delivered{extra}")
    return l, per_k
ls, ks = row("single-node", single, s_t)
lc, kc = row("cross-node", cluster, a_t + b_t,
             f" (A {a_t*1000/hz/1000:.2f} s + B {b_t*1000/hz/1000:.2f} s; broker {k_t/hz:.2f} s)")
print(f"cross-node minus single-node: p50 {(lc['p50']-ls['p50'])/1000:+.2f} ms, "
      f"p99 {(lc['p99']-ls['p99'])/1000:+.2f} ms; CPU per 1,000 delivered {kc/ks:.2f}x "
      f"({(kc + k_t*1e6/hz/cluster['received'])/ks:.2f}x with the broker)")
PY
