#!/usr/bin/env bash
# Fault injection: a real Kafka broker and three `tidegate serve` nodes in
# cluster mode on this machine (each with Forward, S2S, KV and a Kafka sink
# route for the ingested topics), stock clients under load, and four faults
# one after the other:
#   1. kill -9 node 0 (the Forward producer's node), restarted after KILL_DOWN s
#   2. the broker stopped (SIGTERM) for BROKER_DOWN s, then started again
#   3. SIGSTOP of node 1 (the S2S producer's first node) for STOP_SECS s
#   4. node 2's KV data directory, a tmpfs of DISK_MB MiB, filled up for
#      DISK_FULL s (every write there fails with ENOSPC), then freed
# Producers: Fluency → Forward (node 0), the NiFi S2S client → S2S (node 1,
# then the next node after a failure), Python PUTs with ack=2&from=3 → KV
# (round robin over the nodes). Subscribers: socket.io-client sessions, two
# per node, that reconnect to the next node when theirs drops, and are
# recovered there (connection state recovery from the backbone). Every
# event has a unique id; each producer logs what it got acknowledged.
#
# At the end it reads the Kafka sink topic back with the stock Java consumer
# and GETs every acknowledged KV key on a quorum, and prints per source:
# acknowledged, missing downstream (must be 0), duplicates, what the
# subscribers saw and missed (reported, not failed on), the time to recover
# after each fault (first acknowledgement after the fault ended) and each
# node's peak RSS (sampled every 0.5 s; must stay under RSS_MB). Exits 1 if
# anything acknowledged is missing, a producer could not finish, a node
# died on its own, or a bound was exceeded.
#
#   bash scripts/chaos.sh                    # the issue's durations
#   CHAOS_SHORT=1 bash scripts/chaos.sh      # the test's run: about a minute
#   CHAOS_BROKER_DOWN=30 bash scripts/chaos.sh   # any duration below
# Parameters (env, seconds unless said): CHAOS_WARMUP, CHAOS_SETTLE (between
# faults), CHAOS_KILL_DOWN, CHAOS_BROKER_DOWN, CHAOS_STOP_SECS,
# CHAOS_DISK_FULL, CHAOS_DISK_MB, CHAOS_RSS_MB, CHAOS_FWD_RATE (records/s),
# CHAOS_S2S_TX (transactions/s of 10), CHAOS_KV_RATE (PUTs/s).
# CHAOS_RECOVERY_WINDOW_MS: the nodes' [push] recovery_window_ms (default
# 60000; 0 turns recovery off, and a subscriber that moves starts afresh).
# CHAOS_SINK_EXTRA: more lines for every node's [sinks.kafka] section
# (e.g. a librdkafka debug property with RUST_LOG=warn,librdkafka=debug);
# CHAOS_KEEP=1 keeps the work directory (logs) and prints its path.
# TIDEGATE_BIN: the binary (default: the release build, built if missing).
# Needs root for the tmpfs mount; without it the disk fault is skipped and
# the table says so. Take the machine lock: flock /tmp/quiet.lock bash scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
# shellcheck source=bench/kafka-broker.sh
source scripts/bench/kafka-broker.sh
# The broker on the JVM's default collector (G1), as every chaos run before
# the latency benchmarks moved to ZGC: this run measures what is lost and
# how fast things come back, not latency, and one CI run on ZGC had
# Fluency's acks never resume after the broker outage (not reproduced in 8
# local runs since). KAFKA_BENCH_JVM_OPTS still overrides.
export KAFKA_BENCH_JVM_OPTS="${KAFKA_BENCH_JVM_OPTS:--Xms1g -Xmx1g}"

if [ "${CHAOS_SHORT:-0}" = 1 ]; then
    d_warmup=3 d_settle=4 d_kill=1 d_broker=5 d_stop=3 d_disk=4
    d_fwd=200 d_s2s=10 d_kv=60
else
    d_warmup=15 d_settle=15 d_kill=3 d_broker=20 d_stop=10 d_disk=15
    d_fwd=1000 d_s2s=50 d_kv=200
fi
WARMUP=${CHAOS_WARMUP:-$d_warmup}
SETTLE=${CHAOS_SETTLE:-$d_settle}
KILL_DOWN=${CHAOS_KILL_DOWN:-$d_kill}
BROKER_DOWN=${CHAOS_BROKER_DOWN:-$d_broker}
STOP_SECS=${CHAOS_STOP_SECS:-$d_stop}
DISK_FULL=${CHAOS_DISK_FULL:-$d_disk}
DISK_MB=${CHAOS_DISK_MB:-64}
RSS_MB=${CHAOS_RSS_MB:-512}
FWD_RATE=${CHAOS_FWD_RATE:-$d_fwd}
S2S_TX=${CHAOS_S2S_TX:-$d_s2s}
KV_RATE=${CHAOS_KV_RATE:-$d_kv}

BIN="${TIDEGATE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tidegate}"
if [ ! -x "$BIN" ]; then
    cargo build --release -p tidegate
fi
S2S_LIB="$ROOT/crates/s2s/tests/java/v1/target/lib"
PUSH_JS="$ROOT/crates/push/tests/js/node_modules"
[ -d "$S2S_LIB" ] || bash scripts/setup/s2s.sh
[ -d "$PUSH_JS/socket.io-client" ] || bash scripts/setup/push.sh
ulimit -n 65536 2>/dev/null || true

now_ms() { date +%s%3N; }
log() { echo "[$(date -u +%T)] $*"; }

WORK="$(mktemp -d /tmp/tidegate-chaos.XXXXXX)"
STOP="$WORK/stop"
NODE_PIDS=("" "" "")
BG=()
DISK_MOUNTED=0
cleanup() {
    local p
    for p in "${NODE_PIDS[@]}" "${BG[@]}"; do
        [ -n "$p" ] || continue
        kill -CONT "$p" 2>/dev/null || true
        kill -9 "$p" 2>/dev/null || true
    done
    kafka_stop
    wait 2>/dev/null || true
    if [ "$DISK_MOUNTED" = 1 ]; then umount "$WORK/kvdisk" 2>/dev/null || true; fi
    if [ -n "${CHAOS_KEEP:-}" ]; then
        echo "kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

log "chaos run: warm-up ${WARMUP}s, settle ${SETTLE}s, kill -9 down ${KILL_DOWN}s, broker down ${BROKER_DOWN}s, SIGSTOP ${STOP_SECS}s, disk full ${DISK_FULL}s (${DISK_MB} MiB tmpfs), RSS bound ${RSS_MB} MiB"
log "load: Forward ${FWD_RATE}/s, S2S ${S2S_TX} tx/s of 10, KV ${KV_RATE} PUT/s (ack=2&from=3)"
kafka_start
log "broker at $KAFKA_BOOTSTRAP"

# Restarts the broker stopped by fault 2 on the same data and ports.
kafka_again() {
    java -Xms1g -Xmx1g -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -cp "$KAFKA_CP" \
        kafka.Kafka "$KAFKA_DIR/server.properties" >> "$KAFKA_DIR/broker.log" 2>&1 &
    KAFKA_PID=$!
}

HTTP=() FWD=() RAW=()
for i in 0 1 2; do
    HTTP+=("$(kafka_free_port)") FWD+=("$(kafka_free_port)") RAW+=("$(kafka_free_port)")
done
KV_NODES="\"http://127.0.0.1:${HTTP[0]}\",\"http://127.0.0.1:${HTTP[1]}\",\"http://127.0.0.1:${HTTP[2]}\""
mkdir -p "$WORK/kvdisk"
if mount -t tmpfs -o "size=${DISK_MB}m" chaos-kv "$WORK/kvdisk" 2>/dev/null; then
    DISK_MOUNTED=1
else
    log "cannot mount a tmpfs (not root?): the disk fault is skipped"
fi

for i in 0 1 2; do
    data="$WORK/kv$i"
    [ "$i" = 2 ] && data="$WORK/kvdisk/kv"
    cat > "$WORK/node$i.toml" <<EOF
[http]
listen = "127.0.0.1:${HTTP[$i]}"
[wire]
enabled = false
[sockperf]
enabled = false
[forward]
listen = "127.0.0.1:${FWD[$i]}"
udp_heartbeat = false
[s2s]
listen = "127.0.0.1:${RAW[$i]}"
[[s2s.input_ports]]
name = "input"
topic = "s2s.chaos"
[cluster]
backbone = "kafka"
brokers = "$KAFKA_BOOTSTRAP"
node = "chaos-$i"
topic = "chaos-backbone"
partitions = 4
[push]
recovery_window_ms = ${CHAOS_RECOVERY_WINDOW_MS:-60000}
[sinks.kafka]
brokers = "$KAFKA_BOOTSTRAP"
topic = "chaos-sink"
${CHAOS_SINK_EXTRA:-}
[[routes]]
topics = "logs.>"
sink = "kafka"
[[routes]]
topics = "s2s.>"
sink = "kafka"
[kv]
data_dir = "$data"
self = "http://127.0.0.1:${HTTP[$i]}"
nodes = [$KV_NODES]
cluster_secret = "chaos-secret"
EOF
done

# start_node I: starts node I (its pid in NODE_PIDS[I] and $WORK/pidI, read
# by the RSS sampler) and waits for /healthz.
start_node() {
    local i=$1 t
    RUST_LOG=${RUST_LOG:-warn} "$BIN" serve --config "$WORK/node$i.toml" >> "$WORK/node$i.log" 2>&1 &
    NODE_PIDS[i]=$!
    echo "${NODE_PIDS[i]}" > "$WORK/pid$i"
    for t in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:${HTTP[$i]}/healthz" && return 0
        if ! kill -0 "${NODE_PIDS[i]}" 2>/dev/null; then break; fi
        sleep 0.1
    done
    tail -20 "$WORK/node$i.log" >&2
    echo "node $i did not come up" >&2
    exit 1
}
for i in 0 1 2; do start_node "$i"; done
log "nodes up: http ${HTTP[*]}, forward ${FWD[*]}, s2s ${RAW[*]}"
# Every node reads the backbone before the subscribers come: a node knows
# the sessions announced while it reads (so it can recover them), and a
# subscription made before its node reads cannot say where it started.
for i in 0 1 2; do
    for t in $(seq 1 600); do
        curl -sf "http://127.0.0.1:${HTTP[$i]}/metrics" | grep -q '^tidegate_cluster_partitions 4$' && break
        [ "$t" = 600 ] && { echo "node $i never read the backbone" >&2; exit 1; }
        sleep 0.1
    done
done
log "every node reads the backbone"

# RSS of every node every 0.5 s: "<ms> <node> <kB>".
(
    while [ ! -e "$STOP.rss" ]; do
        for i in 0 1 2; do
            p=$(cat "$WORK/pid$i" 2>/dev/null || true)
            r=$(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
            [ -n "$r" ] && echo "$(now_ms) $i $r"
        done
        sleep 0.5
    done
) > "$WORK/rss.log" &
BG+=($!)

URLS="http://127.0.0.1:${HTTP[0]},http://127.0.0.1:${HTTP[1]},http://127.0.0.1:${HTTP[2]}"
NODE_PATH="$PUSH_JS" node scripts/chaos/subscriber.js "$URLS" 6 "logs.>" "s2s.>" \
    > "$WORK/subs.log" 2> "$WORK/subs.err" &
SUB_PID=$!
BG+=("$SUB_PID")
java -cp "$(cat "$KAFKA_CACHE/fluency.classpath")" scripts/chaos/FluencyChaos.java \
    127.0.0.1 "${FWD[0]}" logs.chaos "$FWD_RATE" "$STOP" > "$WORK/fwd.log" 2> "$WORK/fwd.err" &
FWD_PID=$!
BG+=("$FWD_PID")
S2S_URLS="http://127.0.0.1:${HTTP[0]}/nifi,http://127.0.0.1:${HTTP[1]}/nifi,http://127.0.0.1:${HTTP[2]}/nifi"
java -cp "$S2S_LIB/*" scripts/chaos/S2sChaos.java "$S2S_URLS" 1 10 "$S2S_TX" "$STOP" \
    > "$WORK/s2s.log" 2> "$WORK/s2s.err" &
S2S_PID=$!
BG+=("$S2S_PID")
python3 scripts/chaos/kv_chaos.py put "127.0.0.1:${HTTP[0]},127.0.0.1:${HTTP[1]},127.0.0.1:${HTTP[2]}" \
    "$KV_RATE" 4 "$STOP" > "$WORK/kv.log" 2> "$WORK/kv.err" &
KV_PID=$!
BG+=("$KV_PID")

# fault NAME START END [KV_BACK]: one line of $WORK/faults.log (END: when
# the fault was lifted, which is where recovery is measured from; KV_BACK:
# when node 2 took a write again, or "never").
fault() { echo "$*" >> "$WORK/faults.log"; }
: > "$WORK/faults.log"

log "warm-up ${WARMUP}s"
sleep "$WARMUP"

log "fault 1: kill -9 node 0 for ${KILL_DOWN}s"
t0=$(now_ms)
kill -9 "${NODE_PIDS[0]}"
wait "${NODE_PIDS[0]}" 2>/dev/null || true
sleep "$KILL_DOWN"
t1=$(now_ms)
start_node 0
fault "kill-9-node0" "$t0" "$t1"
sleep "$SETTLE"

log "fault 2: broker stopped for ${BROKER_DOWN}s"
t0=$(now_ms)
kill "$KAFKA_PID"
for _ in $(seq 1 300); do kill -0 "$KAFKA_PID" 2>/dev/null || break; sleep 0.1; done
kill -9 "$KAFKA_PID" 2>/dev/null || true
wait "$KAFKA_PID" 2>/dev/null || true
sleep "$BROKER_DOWN"
t1=$(now_ms)
starts=$(grep -c "Kafka Server started" "$KAFKA_DIR/broker.log" || true)
kafka_again
for _ in $(seq 1 600); do
    [ "$(grep -c "Kafka Server started" "$KAFKA_DIR/broker.log" || true)" -gt "$starts" ] && break
    sleep 0.1
done
fault "broker-stopped" "$t0" "$t1"
log "broker back ($(( ($(now_ms) - t1) )) ms to start)"
sleep "$SETTLE"

# The node the S2S producer is on now (it moves after a failure).
s=$(awk '$1 == "AT" {n = $2} END {print n + 0}' "$WORK/s2s.log")
log "fault 3: SIGSTOP node $s (the S2S producer's) for ${STOP_SECS}s"
t0=$(now_ms)
kill -STOP "${NODE_PIDS[s]}"
sleep "$STOP_SECS"
kill -CONT "${NODE_PIDS[s]}"
t1=$(now_ms)
fault "sigstop-node$s" "$t0" "$t1"
sleep "$SETTLE"

if [ "$DISK_MOUNTED" = 1 ]; then
    log "fault 4: node 2's KV disk full for ${DISK_FULL}s"
    t0=$(now_ms)
    dd if=/dev/zero of="$WORK/kvdisk/filler" bs=64k 2>/dev/null || true
    sleep "$DISK_FULL"
    rm -f "$WORK/kvdisk/filler"
    t1=$(now_ms)
    # Does node 2 take writes again? A PUT with ack=3&from=3 needs every
    # replica, node 2 included: the first 201 after the disk was freed.
    back=never
    for n in $(seq 1 $((SETTLE * 2))); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data probe \
            "http://127.0.0.1:${HTTP[0]}/v0/entity?id=chaos-probe-$n&ack=3&from=3" || true)
        if [ "$code" = 201 ]; then back=$(now_ms); break; fi
        sleep 0.5
    done
    fault "kv-disk-full-node2" "$t0" "$t1" "$back"
    # A node that cannot write must say so where a balancer looks.
    curl -s "http://127.0.0.1:${HTTP[2]}/readyz" > "$WORK/kv-readyz.json" || true
    sleep "$(( SETTLE - n / 2 > 0 ? SETTLE - n / 2 : 0 ))"
else
    fault "kv-disk-full-node2" skipped skipped
fi

log "stopping the producers; waiting for every acknowledgement"
touch "$STOP"
producers_ok=1
for p in "$FWD_PID" "$S2S_PID" "$KV_PID"; do
    if ! wait "$p"; then producers_ok=0; fi
done
log "producers done; letting subscribers drain"
sleep 3
kill "$SUB_PID" 2>/dev/null || true
wait "$SUB_PID" 2>/dev/null || true
touch "$STOP.rss"
sleep 1

died=""
for i in 0 1 2; do
    kill -0 "${NODE_PIDS[i]}" 2>/dev/null || died="$died $i"
done
# What the subscribers' bounded queues dropped (drop-oldest), per node
# since its last start (node 0's count restarts with it): the subscriber
# misses the report shows should be these, not losses of the backbone.
drops=""
for i in 0 1 2; do
    d="$(curl -s "http://127.0.0.1:${HTTP[i]}/metrics" | awk '$1 == "tidegate_hub_dropped_oldest_total" {print $2}')"
    drops="$drops node $i: ${d:-?};"
done
log "messages dropped by full subscriber queues (drop-oldest), since each node's start:$drops"

# Each node's counters and readiness as the run ends, for the failure
# output: a path that stopped acknowledging (a sink queue that never
# drains, a budget held, a backbone list full) shows there.
for i in 0 1 2; do
    curl -s -m 5 "http://127.0.0.1:${HTTP[i]}/metrics" > "$WORK/metrics$i.txt" 2>&1 || true
    curl -s -m 5 "http://127.0.0.1:${HTTP[i]}/readyz" > "$WORK/readyz$i.txt" 2>&1 || true
done

log "reading chaos-sink back; checking every acknowledged KV key"
java -cp "$KAFKA_CP" scripts/chaos/KafkaReadBack.java "$KAFKA_BOOTSTRAP" chaos-sink \
    > "$WORK/sink.txt" 2> "$WORK/readback.err" || { tail "$WORK/readback.err" >&2; echo "read back failed" >&2; exit 1; }
python3 scripts/chaos/kv_chaos.py check \
    "127.0.0.1:${HTTP[0]},127.0.0.1:${HTTP[1]},127.0.0.1:${HTTP[2]}" "$WORK/kv.log" > "$WORK/kvcheck.txt"

set +e
python3 scripts/chaos/report.py "$WORK" "$RSS_MB" "$producers_ok" "$died"
rc=$?
set -e
if [ "$rc" != 0 ]; then
    for i in 0 1 2; do
        echo "--- node $i log (last 15 lines)" >&2
        tail -15 "$WORK/node$i.log" >&2
    done
    for f in fwd s2s kv; do
        echo "--- $f producer (last 10 lines of its output and of its errors)" >&2
        tail -n 10 "$WORK/$f.log" "$WORK/$f.err" >&2
        echo "--- $f producer: its distinct error lines (stack frames left out)" >&2
        grep -v '^[[:space:]]*at ' "$WORK/$f.err" | sort | uniq -c | sort -rn | head -15 >&2 || true
    done
    for i in 0 1 2; do
        echo "--- node $i at the end: /readyz $(cat "$WORK/readyz$i.txt" 2>/dev/null)" >&2
        grep -E '^tidegate_(forward|s2s|listener_connections|hub_(inflight|published|routed|route_failures)|sink|kafka|cluster)' \
            "$WORK/metrics$i.txt" >&2 || true
    done
fi
exit "$rc"
