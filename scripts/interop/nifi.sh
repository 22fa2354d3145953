#!/usr/bin/env bash
# Real Apache NiFi as Tidegate's Site-to-Site peer. It downloads NiFi
# 1.18.0 from Maven Central (~1.5 GB with its NARs) and NiFi needs ~1.3 GB of
# memory and a minute to start. See docs/s2s.md. scripts/test.sh (CI) runs
# it without the benches: the interop checks of steps 4 and 5 (~1-3 min).
#
#   bash scripts/interop/nifi.sh                      # ~4-6 min
#   CLIENTS="" BENCH_HTTP_CLIENTS="" SINK_EVENTS=2000 bash scripts/interop/nifi.sh   # as CI
#   CLIENTS="100 1000" BENCH_HTTP_CLIENTS="100 1000" bash scripts/interop/nifi.sh
#
# What it does, all on 127.0.0.1:
#  1. lays out NiFi 1.18.0 from Maven Central artifacts (the binary
#     distribution is not published there; 1.18.0 is the newest 1.x whose
#     framework and server NARs are) and NiFi's stock conf/ (from
#     nifi-resources 1.28.1, same keys), starts it unsecured with RAW S2S on
#     18481 and HTTP S2S on the web port 18480;
#  2. builds a flow over NiFi's REST API: input ports `input` (load),
#     `sink-in` (Tidegate's sink) and `client-in` (NiFi's own client), each
#     into a RouteOnAttribute whose output is dropped; input port `loop-in`
#     into output port `output`;
#  3. starts `tidegate serve` (18483, RAW 20000) beside it and runs
#     `tidegate bench s2s` (seed 000: N clients x 20 tx x 5 FlowFiles, one tx
#     per second) over RAW and HTTP against both servers, with the server's
#     CPU and RSS sampled from /proc;
#  4. sends 1,000 FlowFiles into `loop-in` and pulls them back from `output`
#     with the stock nifi-site-to-site-client, over RAW and over HTTP;
#  5. Fluency (stock Fluentd Forward client) -> `tidegate serve` [forward]
#     (tag interop.fluency, topic logs.interop.fluency) -> [sinks.s2s] ->
#     NiFi `sink-in`, RAW and HTTP, counting the FlowFiles on
#     NiFi's side over its REST API; then NiFi's own client sends as many
#     FlowFiles of the same size to `client-in`: FlowFiles/s of each;
#  6. prints one table and exits non-zero if any check failed.
#
# Env: TIDEGATE_BIN (default target/release/tidegate, built if missing),
#      CLIENTS (RAW bench, default "100"), BENCH_HTTP_CLIENTS (HTTP bench,
#      default "100"), TX (default 20), SINK_EVENTS (default 20000),
#      ANCHOR_LOCK (lock file: every timed step runs under `flock` on it),
#      KEEP=1 (keep the work directory).
# Needs: java 17+, mvn, python3, curl (scripts/setup/s2s.sh and
# scripts/setup/kafka.sh install them and build the Java clients used here).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${TIDEGATE_BIN:-$ROOT/target/release/tidegate}"
CLIENTS="${CLIENTS-100}"
BENCH_HTTP_CLIENTS="${BENCH_HTTP_CLIENTS-100}"
TX="${TX:-20}"
SINK_EVENTS="${SINK_EVENTS:-20000}"
NIFI_VERSION=1.18.0
NIFI_HTTP=18480 NIFI_RAW=18481
TG_HTTP=18483 TG_RAW=20000
SINK_HTTP=18485 SINK_FORWARD=18486 SINK_RAW=20001
W="$(mktemp -d)"
NIFI_HOME="$W/nifi"
NIFI_PID="" TG_PID="" SINK_PID=""
FAILED=0

say() { echo "== $*" >&2; }
die() { echo "FAIL: $*" >&2; exit 1; }
check() { # NAME OK(0/1) DETAIL
    if [ "$2" = 1 ]; then echo "check ok: $1 ($3)" | tee -a "$W/checks.txt" >&2
    else echo "check FAILED: $1 ($3)" | tee -a "$W/checks.txt" >&2; FAILED=1; fi
}
stop_pid() { # PID [grace seconds]
    [ -n "$1" ] || return 0
    kill "$1" 2>/dev/null || return 0
    for _ in $(seq 1 "${2:-30}"); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
    kill -9 "$1" 2>/dev/null
}
cleanup() {
    stop_pid "$SINK_PID" 10; stop_pid "$TG_PID" 10
    stop_pid "$NIFI_PID" 40   # SIGTERM first: NiFi's shutdown hook
    if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
locked() { if [ -n "${ANCHOR_LOCK:-}" ]; then flock "$ANCHOR_LOCK" "$@"; else "$@"; fi; }

for tool in java mvn python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is missing (run scripts/setup/s2s.sh)"
done
if [ ! -x "$BIN" ]; then
    say "building tidegate (release)"
    (cd "$ROOT" && cargo build --release -p tidegate) || die "cargo build"
fi
for port in $NIFI_HTTP $NIFI_RAW $TG_HTTP $TG_RAW $SINK_HTTP $SINK_FORWARD $SINK_RAW; do
    (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && die "port $port is in use"
done

# ---------------------------------------------------------------- Java clients
say "building the stock S2S client driver and Fluency's classpath"
bash "$ROOT/scripts/setup/s2s.sh" >"$W/setup.log" 2>&1 || die "scripts/setup/s2s.sh: $(tail -3 "$W/setup.log")"
DRIVER_DIR="$ROOT/crates/s2s/tests/java/v1/target"
DRIVER_CP="$DRIVER_DIR/s2s-driver-v1-1.jar:$DRIVER_DIR/lib/*"
FLUENCY_POM="$ROOT/crates/kafka/tests/java/fluency/pom.xml"
mvn -B -q -f "$FLUENCY_POM" dependency:build-classpath -Dmdep.outputFile="$W/fluency.cp" >"$W/mvn.log" 2>&1 \
    || die "Fluency classpath: $(tail -3 "$W/mvn.log")"
FLUENCY_CP="$(cat "$W/fluency.cp")"
driver() { java -cp "$DRIVER_CP" tidegate.s2s.Driver "$@"; }

# ---------------------------------------------------------------- 1. NiFi
say "fetching NiFi $NIFI_VERSION from Maven Central"
mkdir -p "$W/poms" "$NIFI_HOME/logs"
: >"$W/results.tsv" # empty when the benches are skipped (CLIENTS="" BENCH_HTTP_CLIENTS="")
pom() { # NAME then dependency lines
    local name=$1; shift
    { echo "<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
      echo "<groupId>tidegate.interop</groupId><artifactId>$name</artifactId><version>1</version><packaging>pom</packaging><dependencies>"
      printf '%s\n' "$@"; echo "</dependencies></project>"; } >"$W/poms/$name.xml"
}
jar() { echo "<dependency><groupId>$1</groupId><artifactId>$2</artifactId><version>$3</version></dependency>"; }
# NARs are copied as they are: their own jars are inside them.
nar() { echo "<dependency><groupId>org.apache.nifi</groupId><artifactId>$1</artifactId><version>$NIFI_VERSION</version><type>nar</type><exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>"; }
V=$NIFI_VERSION
pom nifi-lib \
    "$(jar org.apache.nifi nifi-runtime $V)" "$(jar org.apache.nifi nifi-api $V)" \
    "$(jar org.apache.nifi nifi-framework-api $V)" "$(jar org.apache.nifi nifi-server-api $V)" \
    "$(jar org.apache.nifi nifi-nar-utils $V)" "$(jar org.apache.nifi nifi-properties $V)" \
    "$(jar org.apache.nifi nifi-property-utils $V)" "$(jar org.apache.nifi nifi-stateless-api $V)" \
    "$(jar org.apache.nifi nifi-stateless-bootstrap $V)" "$(jar ch.qos.logback logback-classic 1.2.11)" \
    "$(jar org.slf4j slf4j-api 1.7.36)" "$(jar org.slf4j jcl-over-slf4j 1.7.36)" \
    "$(jar org.slf4j jul-to-slf4j 1.7.36)" "$(jar org.slf4j log4j-over-slf4j 1.7.36)" \
    "$(jar javax.servlet javax.servlet-api 3.1.0)" "$(jar org.eclipse.jetty.toolchain jetty-schemas 5.2)" \
    "$(nar nifi-framework-nar)" "$(nar nifi-server-nar)" "$(nar nifi-jetty-bundle)" \
    "$(nar nifi-provenance-repository-nar)" "$(nar nifi-standard-services-api-nar)" "$(nar nifi-standard-nar)"
pom nifi-bootstrap "$(jar org.apache.nifi nifi-bootstrap $V)" "$(jar org.apache.nifi nifi-properties-loader $V)" \
    "$(jar org.apache.nifi nifi-property-protection-factory $V)"
# Java 11+ no longer ships JAXB and javax.activation: NiFi 1.x puts these in lib/java11.
pom nifi-java11 "$(jar jakarta.xml.bind jakarta.xml.bind-api 2.3.3)" "$(jar org.glassfish.jaxb jaxb-runtime 2.3.5)" \
    "$(jar com.sun.activation javax.activation 1.2.0)" "$(jar javax.annotation javax.annotation-api 1.3.2)"
fetch() { timeout 1200 mvn -B -q -f "$W/poms/$1.xml" dependency:copy-dependencies -DoutputDirectory="$2" >"$W/mvn.log" 2>&1 \
    || die "maven ($1): $(tail -3 "$W/mvn.log")"; }
fetch nifi-lib "$NIFI_HOME/lib"
fetch nifi-bootstrap "$NIFI_HOME/lib/bootstrap"
fetch nifi-java11 "$NIFI_HOME/lib/java11"
timeout 600 mvn -B -q dependency:copy -Dartifact=org.apache.nifi:nifi-resources:1.28.1:zip:resources \
    -DoutputDirectory="$W/resources" >"$W/mvn.log" 2>&1 || die "nifi-resources: $(tail -3 "$W/mvn.log")"
python3 - "$W"/resources/nifi-resources-*.zip "$NIFI_HOME" <<'EOF' || die "unpacking conf/"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("conf/"):
        z.extract(n, sys.argv[2])
EOF

say "configuring NiFi (plain HTTP, RAW S2S on $NIFI_RAW, HTTP S2S on $NIFI_HTTP)"
PROPS="$NIFI_HOME/conf/nifi.properties"
prop() {
    if grep -q "^$1=" "$PROPS"; then sed -i "s|^$1=.*|$1=$2|" "$PROPS"; else echo "$1=$2" >>"$PROPS"; fi
}
prop nifi.web.http.host 127.0.0.1
prop nifi.web.http.port $NIFI_HTTP
prop nifi.web.https.host ""
prop nifi.web.https.port ""
for k in keystore keystoreType keystorePasswd keyPasswd truststore truststoreType truststorePasswd; do prop "nifi.security.$k" ""; done
prop nifi.security.user.authorizer ""
prop nifi.security.user.login.identity.provider ""
prop nifi.sensitive.props.key "tidegate-interop-key-0123"
prop nifi.remote.input.host 127.0.0.1
prop nifi.remote.input.socket.port $NIFI_RAW
prop nifi.remote.input.secure false
prop nifi.remote.input.http.enabled true
# The stock content archive stops writes once the disk is more than half
# full ("waiting for archive cleanup"), which would measure the disk.
prop nifi.content.repository.archive.enabled false

say "starting NiFi"
CP="$NIFI_HOME/conf"
for j in "$NIFI_HOME"/lib/*.jar "$NIFI_HOME"/lib/java11/*.jar; do CP="$CP:$j"; done
# The stock bootstrap.conf's JVM arguments, started directly (no RunNiFi).
(cd "$NIFI_HOME" && ulimit -n 20000 && exec java -classpath "$CP" -Xms1g -Xmx2g \
    -Djava.net.preferIPv4Stack=true -Dsun.net.http.allowRestrictedHeaders=true \
    -Djava.protocol.handler.pkgs=sun.net.www.protocol -Djava.awt.headless=true \
    -Djava.security.egd=file:/dev/urandom -Djavax.security.auth.useSubjectCredsOnly=true \
    -Dzookeeper.admin.enableServer=false -Dorg.apache.jasper.compiler.disablejsr199=true \
    -Dnifi.properties.file.path="$PROPS" -Dapp=NiFi \
    -Dorg.apache.nifi.bootstrap.config.log.dir="$NIFI_HOME/logs" \
    org.apache.nifi.NiFi >"$NIFI_HOME/logs/stdout.log" 2>&1) &
NIFI_PID=$!
API="http://127.0.0.1:$NIFI_HTTP/nifi-api"
for _ in $(seq 1 240); do
    curl -sf -m 5 "$API/flow/about" >/dev/null && break
    kill -0 "$NIFI_PID" 2>/dev/null || die "NiFi exited: $(grep -m3 ERROR "$NIFI_HOME"/logs/nifi-app.log)"
    sleep 1
done
curl -sf -m 5 "$API/flow/about" >/dev/null || die "NiFi's API did not answer within 240 s"

# ---------------------------------------------------------------- 2. flow
say "building the flow over NiFi's REST API"
json() { python3 -c "import sys, json; d = json.load(sys.stdin); print($1)"; }
ROOT_PG=$(curl -sf "$API/flow/process-groups/root" | json 'd["processGroupFlow"]["id"]') || die "root group"
create() { # KIND BODY -> id
    curl -sf -m 30 -H 'Content-Type: application/json' -X POST "$API/process-groups/$ROOT_PG/$1" -d "$2" \
        | json 'd["id"]'
}
port() { # KIND NAME
    create "$1" "{\"revision\":{\"version\":0},\"component\":{\"name\":\"$2\",\"allowRemoteAccess\":true}}"
}
drop() { # a RouteOnAttribute with no rules whose only output is dropped
    create processors "{\"revision\":{\"version\":0},\"component\":{\"name\":\"$1\",
      \"type\":\"org.apache.nifi.processors.standard.RouteOnAttribute\",
      \"bundle\":{\"group\":\"org.apache.nifi\",\"artifact\":\"nifi-standard-nar\",\"version\":\"$NIFI_VERSION\"},
      \"config\":{\"autoTerminatedRelationships\":[\"unmatched\"]}}}"
}
connect() { # SRC_ID SRC_TYPE DST_ID DST_TYPE
    create connections "{\"revision\":{\"version\":0},\"component\":{
      \"source\":{\"id\":\"$1\",\"groupId\":\"$ROOT_PG\",\"type\":\"$2\"},
      \"destination\":{\"id\":\"$3\",\"groupId\":\"$ROOT_PG\",\"type\":\"$4\"}}}" >/dev/null
}
declare -A PORT_ID
for name in input sink-in client-in; do
    PORT_ID[$name]=$(port input-ports "$name") || die "input port $name"
    p=$(drop "drop-$name") || die "processor for $name"
    connect "${PORT_ID[$name]}" INPUT_PORT "$p" PROCESSOR || die "connection $name"
done
PORT_ID[loop-in]=$(port input-ports loop-in) || die "input port loop-in"
PORT_ID[output]=$(port output-ports output) || die "output port"
connect "${PORT_ID[loop-in]}" INPUT_PORT "${PORT_ID[output]}" OUTPUT_PORT || die "loop connection"
curl -sf -m 30 -H 'Content-Type: application/json' -X PUT "$API/flow/process-groups/$ROOT_PG" \
    -d "{\"id\":\"$ROOT_PG\",\"state\":\"RUNNING\"}" >/dev/null || die "starting the flow"
sleep 3
# FlowFiles that went through input port NAME, over NiFi's 5-minute status window.
port_count() {
    curl -sf -m 10 "$API/flow/input-ports/${PORT_ID[$1]}/status" \
        | json 'd["portStatus"]["aggregateSnapshot"]["flowFilesOut"]'
}

# Waits (at most 180 s) until NiFi's flow holds fewer than 100 queued
# FlowFiles, so that one run's backlog does not fill the next one's port.
drain() {
    for _ in $(seq 1 180); do
        q=$(curl -sf -m 10 "$API/flow/process-groups/root/status" \
            | json 'd["processGroupStatus"]["aggregateSnapshot"]["flowFilesQueued"]' 2>/dev/null || echo 0)
        [ "${q:-0}" -lt 100 ] && return 0
        sleep 1
    done
    echo "NiFi still holds $q queued FlowFiles" >&2
}

# ---------------------------------------------------------------- 3. tidegate
cat >"$W/tidegate.toml" <<EOF
[http]
listen = "127.0.0.1:$TG_HTTP"
[wire]
enabled = false
[sockperf]
enabled = false
[forward]
enabled = false
[s2s]
listen = "127.0.0.1:$TG_RAW"
host = "127.0.0.1"
[[s2s.input_ports]]
name = "input"
topic = "s2s.input"
EOF
(ulimit -n 20000 && exec "$BIN" serve --config "$W/tidegate.toml" >"$W/tidegate.log" 2>&1) &
TG_PID=$!
for _ in $(seq 1 50); do curl -sf -m 2 "http://127.0.0.1:$TG_HTTP/nifi-api/site-to-site" >/dev/null && break; sleep 0.2; done

# Samples CPU % (100 = one core) and RSS of PID once a second until killed.
sampler() {
    # exec: the caller's $! is then python itself, which its SIGTERM reaches.
    exec python3 - "$1" <<'EOF'
import os, signal, sys, time
pid, hz = int(sys.argv[1]), os.sysconf("SC_CLK_TCK")
cpu, rss, stop = [], [], []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
last, t0 = ticks(), time.time()
while not stop:
    time.sleep(1)
    try:
        now, t = ticks(), time.time()
        cpu.append(100.0 * (now - last) / hz / (t - t0)); last, t0 = now, t
        rss.append(int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024)
    except (FileNotFoundError, ProcessLookupError):
        break
avg = sum(cpu) / len(cpu) if cpu else 0.0
print(f"{avg:.1f} {max(cpu or [0]):.1f} {max(rss or [0]) // 1024}")
EOF
}

# One bench run: SERVER PID TRANSPORT CLIENTS HTTP_PORT -> a line in results.tsv
bench() {
    local out="$W/bench.json" samp="$W/samp.txt"
    sampler "$2" >"$samp" & local sp=$!
    (ulimit -n 20000; timeout 900 "$BIN" bench s2s --target "127.0.0.1:$5" --clients "$4" --tx "$TX" --packets 5 \
        --interval-ms 1000 --transport "$3" --json >"$out" 2>"$W/bench.err")
    local rc=$?
    kill -TERM "$sp"; wait "$sp"
    python3 - "$out" "$1" "$3" "$4" "$rc" "$(cat "$samp")" >>"$W/results.tsv" <<'EOF'
import json, sys
path, server, transport, clients, rc, samp = sys.argv[1:]
cpu_avg, cpu_max, rss = samp.split()
try:
    d = json.load(open(path)); e = d["extra"]
    ok, failed = e["totalSuccessfulTx"], e["totalFailureTx"]
    cells = [ok, failed] + [f"{e[k]:.2f}" for k in ("avgCreateTxMillis", "avgSendMillis", "avgConfirmMillis", "avgCompleteMillis")]
    cells += [f"{d['duration_s']:.1f}", ",".join(f"{k}:{v}" for k, v in d["errors"].items()) or "-"]
except Exception as ex:
    cells = ["-", "-", "-", "-", "-", "-", "-", f"no result (rc {rc}: {ex})"]
print("\t".join(map(str, [server, transport.upper(), clients] + cells + [f"{cpu_avg}/{cpu_max}", rss])))
EOF
    tail -1 "$W/results.tsv" >&2
}
# HTTP first, then RAW (the 3,000-client RAW run leaves NiFi the largest
# backlog); NiFi's queues are drained before each of its runs.
for n in $BENCH_HTTP_CLIENTS; do
    say "bench s2s HTTP, $n clients: NiFi, then Tidegate"
    drain
    locked bash -c "$(declare -f sampler bench); W='$W' BIN='$BIN' TX='$TX'
        bench nifi $NIFI_PID http $n $NIFI_HTTP; bench tidegate $TG_PID http $n $TG_HTTP"
done
for n in $CLIENTS; do
    say "bench s2s RAW, $n clients: NiFi, then Tidegate"
    drain
    locked bash -c "$(declare -f sampler bench); W='$W' BIN='$BIN' TX='$TX'
        bench nifi $NIFI_PID raw $n $NIFI_HTTP; bench tidegate $TG_PID raw $n $TG_HTTP"
done
# Every transaction must complete. A server that is merely overloaded
# (timeouts, closed, reset or refused connections, transactions it never
# got to, "destination full") is reported, not failed; any other failure kind
# (http, protocol, bad_frame, refused, bad_checksum) is a protocol mismatch.
while IFS=$'\t' read -r server transport clients ok failed _c _s _f _p _w errors _rest; do
    want=$((clients * TX))
    if [ "$ok" = "$want" ] && [ "$failed" = 0 ]; then
        check "bench s2s $transport x $clients against $server completes every transaction" 1 "$ok of $want"
    elif [ "$ok" != "-" ] && ! echo "$errors" | tr ',' '\n' | cut -d: -f1 \
            | grep -qvE '^(timeout|connection_closed|connection_refused|io|never_started|unfinished|destination_full|too_many_open_files)$'; then
        echo "note: bench s2s $transport x $clients against $server: $server overloaded, $failed of $want failed ($errors)" \
            | tee -a "$W/checks.txt" >&2
    else
        check "bench s2s $transport x $clients against $server" 0 "$ok of $want ok, $failed failed: $errors"
    fi
done <"$W/results.tsv"

# ---------------------------------------------------------------- 4. output port
NIFI_URL="http://127.0.0.1:$NIFI_HTTP/nifi"
for t in RAW HTTP; do
    say "1,000 FlowFiles into loop-in, pulled from output over $t (stock client)"
    sizes=$(python3 -c "print(','.join(['100'] * 100))")
    driver send --url "$NIFI_URL" --transport "$t" --port loop-in --sizes "$sizes" --tx 10 >"$W/loop-send.jsonl" 2>>"$W/driver.err"
    sent=$(grep -c '"event":"complete"' "$W/loop-send.jsonl")
    driver receive --url "$NIFI_URL" --transport "$t" --port output --expect 1000 --wait-ms 60000 \
        >"$W/loop-recv.jsonl" 2>>"$W/driver.err"
    got=$(grep -o '"received":[0-9]*' "$W/loop-recv.jsonl" | cut -d: -f2)
    check "output port over $t" $([ "$sent" = 10 ] && [ "${got:-0}" = 1000 ] && echo 1 || echo 0) \
        "sent $sent tx of 100, pulled ${got:-0}"
done

# ---------------------------------------------------------------- 5. sink
# Waits until input port NAME has passed WANT FlowFiles; prints the seconds
# since START (a `date +%s.%N`), or "timeout".
wait_count() { # NAME WANT START LIMIT_S
    local c=0
    for _ in $(seq 1 $(($4 * 10))); do
        c=$(port_count "$1" 2>/dev/null || echo 0)
        if [ "${c:-0}" -ge "$2" ]; then python3 -c "import time; print(f'{time.time() - $3:.2f}')"; return 0; fi
        sleep 0.1
    done
    echo "timeout($c)"
}
BASE_SINK=0
# Same-run anchor: the same Fluency run into tidegate with a null route
# (acknowledged on arrival), i.e. Fluency and [forward] without the sink.
cat >"$W/null.toml" <<EOF
[http]
listen = "127.0.0.1:$SINK_HTTP"
[wire]
enabled = false
[sockperf]
enabled = false
[s2s]
enabled = false
listen = "127.0.0.1:$SINK_RAW"
[forward]
listen = "127.0.0.1:$SINK_FORWARD"
[[routes]]
topics = "logs.interop.>"
sink = "null"
EOF
say "anchor: Fluency -> tidegate [forward] -> null route: $SINK_EVENTS events"
(ulimit -n 20000 && exec "$BIN" serve --config "$W/null.toml" >"$W/null.log" 2>&1) &
SINK_PID=$!
for _ in $(seq 1 50); do curl -sf -m 2 "http://127.0.0.1:$SINK_HTTP/metrics" >/dev/null && break; sleep 0.2; done
start=$(date +%s.%N)
locked java -cp "$FLUENCY_CP" "$ROOT/crates/kafka/tests/java/fluency/FluencySender.java" \
    127.0.0.1 "$SINK_FORWARD" interop.fluency "$SINK_EVENTS" 0 "nifi-null" >"$W/fluency.out" 2>"$W/fluency.err"
secs=$(python3 -c "import time; print(f'{time.time() - $start:.2f}')")
printf 'anchor: tidegate null route (Fluency -> Forward, no S2S)\t%s\t%s\t%s\n' "$SINK_EVENTS" "$secs" \
    "$(awk '/^SENT/ {print $3 / 1000}' "$W/fluency.out")" >>"$W/sink.tsv"
stop_pid "$SINK_PID" 10; SINK_PID=""
for t in raw http; do
    say "Fluency -> tidegate [forward] -> [sinks.s2s] ($t) -> NiFi sink-in: $SINK_EVENTS events"
    cat >"$W/sink.toml" <<EOF
[http]
listen = "127.0.0.1:$SINK_HTTP"
[wire]
enabled = false
[sockperf]
enabled = false
[s2s]
enabled = false
listen = "127.0.0.1:$SINK_RAW"
[forward]
listen = "127.0.0.1:$SINK_FORWARD"
[sinks.s2s]
url = "$NIFI_URL"
port = "sink-in"
transport = "$t"
batch_max_flowfiles = 500
batch_max_ms = 20
connections = 4
[[routes]]
topics = "logs.interop.>"
sink = "s2s"
EOF
    "$BIN" config --config "$W/sink.toml" --probe >"$W/probe.txt" 2>&1
    check "tidegate config --probe [sinks.s2s] ($t) finds NiFi's port" \
        $(grep -q "${PORT_ID[sink-in]}" "$W/probe.txt" && echo 1 || echo 0) "$(tr '\n' ' ' <"$W/probe.txt" | cut -c1-160)"
    (ulimit -n 20000 && exec "$BIN" serve --config "$W/sink.toml" >"$W/sink-$t.log" 2>&1) &
    SINK_PID=$!
    for _ in $(seq 1 50); do curl -sf -m 2 "http://127.0.0.1:$SINK_HTTP/metrics" >/dev/null && break; sleep 0.2; done
    start=$(date +%s.%N)
    locked java -cp "$FLUENCY_CP" "$ROOT/crates/kafka/tests/java/fluency/FluencySender.java" \
        127.0.0.1 "$SINK_FORWARD" interop.fluency "$SINK_EVENTS" 0 "nifi-$t" >"$W/fluency.out" 2>"$W/fluency.err"
    fluency_rc=$?
    secs=$(wait_count sink-in $((BASE_SINK + SINK_EVENTS)) "$start" 120)
    count=$(port_count sink-in)
    delivered=$(curl -sf "http://127.0.0.1:$SINK_HTTP/metrics" | awk '/^tidegate_s2s_sink_delivered_total/ {print $2}')
    check "Fluency -> Tidegate -> [sinks.s2s] $t -> NiFi" \
        $([ "$fluency_rc" = 0 ] && [ "$count" -ge $((BASE_SINK + SINK_EVENTS)) ] && echo 1 || echo 0) \
        "Fluency rc $fluency_rc, NiFi counted $((count - BASE_SINK)) of $SINK_EVENTS, sink delivered ${delivered:-?}, ${secs}s"
    BASE_SINK=$count
    printf 'tidegate [sinks.s2s] %s (Fluency -> Forward -> S2S)\t%s\t%s\t%s\n' "$t" "$SINK_EVENTS" "$secs" \
        "$(awk '/^SENT/ {print $3 / 1000}' "$W/fluency.out")" >>"$W/sink.tsv"
    stop_pid "$SINK_PID" 10; SINK_PID=""
done
# The payload size the sink sent, for NiFi's own client to send the same.
avg_size=$(curl -sf -m 10 "$API/flow/input-ports/${PORT_ID[sink-in]}/status" \
    | json 'round(d["portStatus"]["aggregateSnapshot"]["bytesOut"] / max(1, d["portStatus"]["aggregateSnapshot"]["flowFilesOut"]))')
for t in RAW HTTP; do
    say "NiFi's own client: $SINK_EVENTS FlowFiles of $avg_size bytes into client-in over $t, 500 per transaction"
    base=$(port_count client-in)
    sizes=$(python3 -c "print(','.join(['$avg_size'] * 500))")
    start=$(date +%s.%N)
    locked java -cp "$DRIVER_CP" tidegate.s2s.Driver send --url "$NIFI_URL" --transport "$t" --port client-in \
        --sizes "$sizes" --tx $((SINK_EVENTS / 500)) >"$W/client.jsonl" 2>>"$W/driver.err"
    secs=$(wait_count client-in $((base + SINK_EVENTS / 500 * 500)) "$start" 120)
    printf 'NiFi site-to-site client 1.28.1 %s (same FlowFiles)\t%s\t%s\t-\n' "$t" "$((SINK_EVENTS / 500 * 500))" "$secs" >>"$W/sink.tsv"
done

# ---------------------------------------------------------------- 6. table
echo
echo "NiFi $NIFI_VERSION and tidegate serve under tidegate bench s2s ($TX tx x 5 FlowFiles per client, 1 tx/s):"
echo
echo "| server | transport | clients | ok tx | failed tx | create ms | send ms | confirm ms | complete ms | wall s | errors | server CPU avg/max % | server RSS max MB |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
while IFS=$'\t' read -r -a c; do printf '| %s ' "${c[@]}"; echo '|'; done <"$W/results.tsv"
echo
echo "Into NiFi (FlowFiles counted by NiFi's REST API; seconds from the client's start, JVM start included;"
echo "Fluency s = Fluency's own time from its first record to its last acknowledgement):"
echo
echo "| sender | FlowFiles | seconds | FlowFiles/s | Fluency s |"
echo "|---|---:|---:|---:|---:|"
while IFS=$'\t' read -r who n secs fsecs; do
    rate=$(python3 -c "print(f'{$n / $secs:,.0f}')" 2>/dev/null || echo "-")
    echo "| $who | $n | $secs | $rate | ${fsecs:--} |"
done <"$W/sink.tsv"
echo
cat "$W/checks.txt"
[ "$FAILED" = 0 ] || die "some checks failed (KEEP=1 keeps $W for the logs)"
echo "all checks passed"
