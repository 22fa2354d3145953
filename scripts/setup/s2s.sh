#!/usr/bin/env bash
# Installs what the s2s crate's tests need: a JDK 17, Maven and openssl
# (Debian; openssl and keytool turn the TLS test's PEM files into PKCS12), then
# fetches the stock org.apache.nifi:nifi-site-to-site-client 1.28.1 (Java 17)
# and 2.6.0 (Java 21+, run on the Temurin JDK under /usr/lib/jvm) from Maven
# Central and builds the test driver in crates/s2s/tests/java against each.
# Fast when everything is already built.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
JAVA_DIR="$ROOT/crates/s2s/tests/java"
SRC="$JAVA_DIR/src/main/java/tidegate/s2s/Driver.java"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${#need[@]}" -gt 0 ]; then
    if ! apt-cache show "${need[0]}" >/dev/null 2>&1; then
        $SUDO apt-get update
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

# The newest JDK >= 21 under /usr/lib/jvm runs the 2.x client.
jdk21=""
for d in /usr/lib/jvm/*; do
    [ -x "$d/bin/java" ] || continue
    v="$("$d/bin/java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
    if [ -n "$v" ] && [ "$v" -ge 21 ]; then
        jdk21="$d"
    fi
done
if [ -z "$jdk21" ]; then
    echo "s2s setup: no JDK 21+ under /usr/lib/jvm; the nifi-site-to-site-client 2.6.0 tests need one" >&2
    exit 1
fi
echo "$jdk21" > "$JAVA_DIR/.jdk21"

build() { # dir java_home
    local dir="$JAVA_DIR/$1" jar
    jar="$dir/target/s2s-driver-$1-1.jar"
    if [ -f "$jar" ] && [ -d "$dir/target/lib" ] && [ "$jar" -nt "$SRC" ] && [ "$jar" -nt "$dir/pom.xml" ]; then
        return 0
    fi
    (cd "$dir" && JAVA_HOME="$2" mvn -q -B package -DskipTests)
}

build v1 "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
build v2 "$jdk21"
