#!/usr/bin/env bash
# Installs what the Kafka sink's build, tests and benchmarks need:
#  - the build deps of rdkafka's `cmake-build` (librdkafka 2.12 compiled from
#    source: cmake, a C/C++ toolchain, zlib, and the libcurl headers its
#    cmake build includes unconditionally);
#  - a JDK and Maven, then from Maven Central the runtime classpaths of
#    org.apache.kafka:kafka_2.13:3.9.1 (the test broker), kafka-tools:3.9.1
#    (ProducerPerformance, the benchmark anchor) and
#    org.komamitsu:fluency-fluentd (the Forward client of the e2e tests).
# Classpaths are written to ${TIDEGATE_TEST_CACHE:-$HOME/.cache/tidegate}.
# Idempotent; fast when everything is present.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
JAVA_DIR="$ROOT/crates/kafka/tests/java"
CACHE="${TIDEGATE_TEST_CACHE:-$HOME/.cache/tidegate}"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need+=(zlib1g-dev)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need+=(libcurl4-openssl-dev)
if [ "${#need[@]}" -gt 0 ]; then
    if ! apt-cache show "${need[@]}" >/dev/null 2>&1; then
        $SUDO apt-get update
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

# classpath NAME: resolve crates/kafka/tests/java/NAME/pom.xml into $CACHE/NAME.classpath.
classpath() {
    local name="$1" out="$CACHE/$1.classpath"
    if [ -s "$out" ] && [ "$out" -nt "$JAVA_DIR/$name/pom.xml" ]; then
        local ok=1 jar
        IFS=: read -r -a jars < "$out" || true
        for jar in "${jars[@]}"; do [ -e "$jar" ] || { ok=0; break; }; done
        [ "$ok" = 1 ] && return 0
    fi
    mkdir -p "$CACHE"
    mvn -q -B -f "$JAVA_DIR/$name/pom.xml" dependency:build-classpath -Dmdep.outputFile="$out.partial"
    mv "$out.partial" "$out"
}
classpath broker
classpath fluency
