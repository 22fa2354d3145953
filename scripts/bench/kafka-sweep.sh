#!/usr/bin/env bash
# The seed's rate sweep (004: 10 … 500,000 lines/s) through Forward →
# Tidegate → Kafka, with acks that wait for the broker, into a throw-away
# local Kafka 3.9.1 broker. One row per rate: accepted records/s, Tidegate's
# CPU % and RSS, the bench client's, and the Forward ack latency.
#
#   scripts/bench/kafka-sweep.sh
#
# Env: RATES (10,100,1000,10000,100000,150000,250000,300000,400000,500000),
# DURATION (10 s per rate), CONNECTIONS (1), TLS (unset; 1 adds --tls),
# TIDEGATE_BIN (default: release build under $CARGO_TARGET_DIR or target/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=kafka-broker.sh
source "$ROOT/scripts/bench/kafka-broker.sh"

RATES="${RATES:-10,100,1000,10000,100000,150000,250000,300000,400000,500000}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-1}"
kafka_bench_begin
SERVER_TOML="$(printf '[sinks.kafka]\nbrokers = "%s"\n[[routes]]\ntopics = "logs.>"\nsink = "kafka"\n' "$KAFKA_BOOTSTRAP")"
TLS_FLAG=()
if [ -n "${TLS:-}" ]; then TLS_FLAG=(--tls); fi
"$BIN" bench forward --ack --sweep-rate "$RATES" --connections "$CONNECTIONS" \
    --record-bytes 100 --duration "$DURATION" --warmup 1 --tag kafka.sweep \
    "${TLS_FLAG[@]}" --server-toml "$SERVER_TOML"
