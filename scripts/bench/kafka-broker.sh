#!/usr/bin/env bash
# Sourced by the kafka-*.sh benchmarks: starts a throw-away single-node
# Kafka 3.9.1 broker (KRaft, one node acting as broker and controller)
# on free loopback ports, and stops it on exit.
#   kafka_start      sets KAFKA_BOOTSTRAP, KAFKA_PID, KAFKA_DIR, KAFKA_CP
#   kafka_stop       kills it and removes its data
#   kafka_bench_begin  BIN, ulimit, kafka_start with a stop trap, header lines
# Needs scripts/setup/kafka.sh to have run (it is run here if needed).

KAFKA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KAFKA_CACHE="${TIDEGATE_TEST_CACHE:-$HOME/.cache/tidegate}"

kafka_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

kafka_start() {
    bash "$KAFKA_ROOT/scripts/setup/kafka.sh" >/dev/null
    KAFKA_CP="$(cat "$KAFKA_CACHE/broker.classpath")"
    KAFKA_DIR="$(mktemp -d /tmp/tidegate-bench-kafka.XXXXXX)"
    local port ctl
    port="$(kafka_free_port)"
    ctl="$(kafka_free_port)"
    while [ "$ctl" = "$port" ]; do ctl="$(kafka_free_port)"; done
    cat > "$KAFKA_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
    cat > "$KAFKA_DIR/log4j.properties" <<'L4J'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.log=WARN
log4j.logger.org.apache.kafka.storage=WARN
L4J
    java -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -cp "$KAFKA_CP" \
        kafka.tools.StorageTool format -t VGlkZWdhdGVCZW5jaENsdXM -c "$KAFKA_DIR/server.properties" >/dev/null
    # The broker's JVM runs ZGC (JDK 17+): its pauses stay under a
    # millisecond. With G1, even Kafka's own options (kafka-server-start.sh:
    # -XX:MaxGCPauseMillis=20) pause this 2-core machine's broker 5–18 ms
    # every second under the cluster benchmark's load, and those pauses are
    # the cross-node p99 (BENCHMARKS.md, cluster: "The broker's GC pauses").
    # KAFKA_BENCH_JVM_OPTS replaces the options (Kafka's own:
    # "-Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    # -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent");
    # KAFKA_BENCH_GC_LOG=FILE logs every collection.
    local jvm_opts
    read -r -a jvm_opts <<< "${KAFKA_BENCH_JVM_OPTS:--Xms1g -Xmx1g -XX:+UseZGC -Djava.awt.headless=true}"
    if [ -n "${KAFKA_BENCH_GC_LOG:-}" ]; then
        jvm_opts+=("-Xlog:gc:file=$KAFKA_BENCH_GC_LOG")
    fi
    java "${jvm_opts[@]}" -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -cp "$KAFKA_CP" \
        kafka.Kafka "$KAFKA_DIR/server.properties" > "$KAFKA_DIR/broker.log" 2>&1 &
    KAFKA_PID=$!
    KAFKA_BOOTSTRAP="127.0.0.1:$port"
    local i
    for i in $(seq 1 600); do
        if grep -q "Kafka Server started" "$KAFKA_DIR/broker.log"; then
            return 0
        fi
        if ! kill -0 "$KAFKA_PID" 2>/dev/null; then
            tail -30 "$KAFKA_DIR/broker.log" >&2
            echo "kafka broker exited" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "kafka broker did not start in 60 s" >&2
    return 1
}

kafka_stop() {
    if [ -n "${KAFKA_PID:-}" ]; then
        kill "$KAFKA_PID" 2>/dev/null || true
        wait "$KAFKA_PID" 2>/dev/null || true
        KAFKA_PID=""
    fi
    if [ -n "${KAFKA_DIR:-}" ]; then
        rm -rf "$KAFKA_DIR"
        KAFKA_DIR=""
    fi
}

# kafka_bench_begin: what every kafka-*.sh benchmark does first — resolve
# the tidegate binary into BIN (TIDEGATE_BIN, else the release build under
# $CARGO_TARGET_DIR or target/, built if missing), raise the open-file limit,
# start the broker (stopped on exit) and print the run's date and set-up.
kafka_bench_begin() {
    BIN="${TIDEGATE_BIN:-${CARGO_TARGET_DIR:-$KAFKA_ROOT/target}/release/tidegate}"
    if [ ! -x "$BIN" ]; then
        (cd "$KAFKA_ROOT" && cargo build --release -p tidegate)
    fi
    ulimit -n 65536 2>/dev/null || true
    trap kafka_stop EXIT
    kafka_start
    echo "date: $(date -u)"
    echo "broker: Kafka 3.9.1 KRaft single node at $KAFKA_BOOTSTRAP (-Xmx1g); host: $(nproc) cores"
}
