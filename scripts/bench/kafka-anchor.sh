#!/usr/bin/env bash
# End-to-end Forward → Tidegate → Kafka against Kafka's own producer
# benchmark, into the same throw-away local broker, in one command.
#
#   scripts/bench/kafka-anchor.sh
#
# 1. org.apache.kafka.tools.ProducerPerformance (kafka-tools 3.9.1): RECORDS
#    records of 100 B, acks=all, enable.idempotence=true, as fast as it can —
#    with its default batching (batch.size=16384, linger.ms=0), with
#    linger.ms=5 batch.size=1000000, and with Tidegate's sink defaults
#    (linger.ms=20 batch.size=1000000). The ratio is to the best of the three.
# 2. `tidegate bench forward --rate 0 --ack` (PackedForward chunks of 1000
#    ~100 B records, acks wait for the Kafka broker) against a spawned
#    `tidegate serve` whose [[routes]] send logs.> to [sinks.kafka].
# Prints records/s of each, the ratio, and the Forward ack latency p99.
#
# Env: RECORDS (3000000), DURATION (20 s), CONNECTIONS (2), BATCH (1000),
# SINK_TOML (extra [sinks.kafka] keys, e.g. 'linger_ms = 20'; default none),
# TIDEGATE_BIN (default: release build under $CARGO_TARGET_DIR or target/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=kafka-broker.sh
source "$ROOT/scripts/bench/kafka-broker.sh"

RECORDS="${RECORDS:-3000000}"
DURATION="${DURATION:-20}"
CONNECTIONS="${CONNECTIONS:-2}"
BATCH="${BATCH:-1000}"
kafka_bench_begin

# pp TOPIC [PROP=VALUE...] → "records/s p99_ms"
pp() {
    local topic="$1"; shift
    java -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -Dlog4j.rootLogger=WARN -cp "$KAFKA_CP" \
        org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$RECORDS" \
        --record-size 100 --throughput -1 \
        --producer-props bootstrap.servers="$KAFKA_BOOTSTRAP" acks=all enable.idempotence=true "$@" 2>/dev/null \
        | grep "records sent" | tail -1 \
        | sed -E 's/.* records sent, ([0-9.]+) records\/sec.* ([0-9]+) ms 99th.*/\1 \2/'
}

echo "running ProducerPerformance (default batching)…"
read -r PP1_RATE PP1_P99 < <(pp anchor-pp-default)
echo "running ProducerPerformance (linger.ms=5 batch.size=1000000)…"
read -r PP2_RATE PP2_P99 < <(pp anchor-pp-5 linger.ms=5 batch.size=1000000)
echo "running ProducerPerformance (linger.ms=20 batch.size=1000000, Tidegate's sink defaults)…"
read -r PP3_RATE PP3_P99 < <(pp anchor-pp-20 linger.ms=20 batch.size=1000000)

SERVER_TOML="$(printf '[sinks.kafka]\nbrokers = "%s"\ntopic = "logs.kafka.anchor"\n%s\n[[routes]]\ntopics = "logs.>"\nsink = "kafka"\n' "$KAFKA_BOOTSTRAP" "${SINK_TOML:-}")"
echo "running tidegate bench forward → Kafka…"
TG_JSON="$("$BIN" bench forward --json --rate 0 --ack --record-bytes 100 --batch "$BATCH" \
    --connections "$CONNECTIONS" --duration "$DURATION" --warmup 2 --tag kafka.anchor \
    --server-toml "$SERVER_TOML")"

# What actually reached the broker (sum of end offsets of the topic).
IN_KAFKA="$(java -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -cp "$KAFKA_CP" \
    org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$KAFKA_BOOTSTRAP" \
    --topic logs.kafka.anchor 2>/dev/null | awk -F: '{n += $3} END {print n + 0}')"

python3 - "$PP1_RATE" "$PP1_P99" "$PP2_RATE" "$PP2_P99" "$PP3_RATE" "$PP3_P99" "$TG_JSON" "$RECORDS" "$CONNECTIONS" "$BATCH" "$IN_KAFKA" "${SINK_TOML:-}" <<'PY'
import json, sys
pp1, pp1p99, pp2, pp2p99 = float(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
pp3, pp3p99 = float(sys.argv[5]), sys.argv[6]
tg = json.loads(sys.argv[7])
records, conns, batch, in_kafka = sys.argv[8], sys.argv[9], sys.argv[10], int(sys.argv[11])
sink_extra = ", " + sys.argv[12].replace("\n", ", ") if sys.argv[12] else ""
rate = tg["rate"]
lat = tg["latency_us"]
srv = tg["server"]
cli = tg["client"]
best = max(pp1, pp2, pp3)
print()
print(f"| producer (100 B records, acks=all, idempotent) | records/s | ratio to best ProducerPerformance | latency p99 |")
print(f"|---|---|---|---|")
print(f"| ProducerPerformance, default batching ({records} records) | {pp1:,.0f} | {pp1/best:.2f} | {pp1p99} ms (send→broker ack) |")
print(f"| ProducerPerformance, linger.ms=5 batch.size=1000000 ({records} records) | {pp2:,.0f} | {pp2/best:.2f} | {pp2p99} ms (send→broker ack) |")
print(f"| ProducerPerformance, linger.ms=20 batch.size=1000000 ({records} records) | {pp3:,.0f} | {pp3/best:.2f} | {pp3p99} ms (send→broker ack) |")
print(f"| tidegate bench forward → tidegate serve → Kafka ({conns} conn, chunks of {batch}, ack{sink_extra}) | {rate:,.0f} | {rate/best:.2f} | {lat['p99']/1000:.1f} ms (Forward chunk→ack) |")
print()
print(f"Forward ack latency (ms): p50 {lat['p50']/1000:.1f}, p90 {lat['p90']/1000:.1f}, p99 {lat['p99']/1000:.1f}, p99.9 {lat['p999']/1000:.1f}, max {lat['max']/1000:.1f}")
print(f"tidegate serve: CPU {srv['cpu_pct_avg']:.1f}% avg, RSS {srv['rss_kb_max']} kB max; bench client: CPU {cli['cpu_pct_avg']:.1f}%, RSS {cli['rss_kb_max']} kB")
print(f"errors: {tg['errors']}; records acked to the bench: {tg['extra'].get('acked_records')}, records in the Kafka topic afterwards: {in_kafka}")
PY
