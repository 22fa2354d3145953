#!/usr/bin/env bash
# Stock `sockperf ping-pong --tcp -m 64 -t 10` against `sockperf server` (the
# anchor) and against Tidegate's [sockperf] listener (`tidegate serve` with
# only that listener on), in one command, alternating anchor/Tidegate for
# ROUNDS rounds so drift on a shared machine hits both alike. Prints one row
# per run (one-way latency in µs, as sockperf reports it) and the ratio of
# Tidegate's median to the anchor's (medians of the per-run medians).
#
#   scripts/bench/sockperf-anchor.sh            # T=10 s per run, 2 rounds, 64 B
#   T=5 ROUNDS=3 MSG=64 scripts/bench/sockperf-anchor.sh
#   TIDEGATE=/path/to/tidegate scripts/bench/sockperf-anchor.sh
#   EXTRA="--mps 600000 --reply-every 100" MODE=under-load MSG=78 scripts/bench/sockperf-anchor.sh
set -euo pipefail

T=${T:-10}
ROUNDS=${ROUNDS:-2}
MSG=${MSG:-64}
MODE=${MODE:-ping-pong}
EXTRA=${EXTRA:-}
# Extra lines for Tidegate's [sockperf] section, e.g. SOCKPERF_EXTRA='mode = "low_latency"'.
SOCKPERF_EXTRA=${SOCKPERF_EXTRA:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TIDEGATE=${TIDEGATE:-$ROOT/target/release/tidegate}

command -v sockperf >/dev/null || { echo "sockperf missing: run scripts/setup/wire.sh" >&2; exit 1; }
if [ ! -x "$TIDEGATE" ]; then
    echo "building $TIDEGATE (cargo build --release -p tidegate)" >&2
    (cd "$ROOT" && cargo build --release -p tidegate >&2)
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ANCHOR_PORT=$(free_port)
TG_PORT=$(free_port)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/tidegate.toml" <<TOML
[http]
enabled = false
[wire]
enabled = false
[forward]
enabled = false
[s2s]
enabled = false
[sockperf]
listen = "127.0.0.1:$TG_PORT"
${SOCKPERF_EXTRA:-}
TOML

sockperf server --tcp -i 127.0.0.1 -p "$ANCHOR_PORT" >"$WORK/anchor.log" 2>&1 &
PIDS+=($!)
RUST_LOG=warn "$TIDEGATE" serve --config "$WORK/tidegate.toml" >"$WORK/tidegate.log" 2>&1 &
PIDS+=($!)

wait_port() {
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listening on port $1" >&2
    cat "$WORK"/*.log >&2
    exit 1
}
wait_port "$ANCHOR_PORT"
wait_port "$TG_PORT"

# Runs one sockperf client; prints "obs avg p50 p99 p99.9 p99.99 max drop dup ooo".
run() {
    local out
    # shellcheck disable=SC2086
    out=$(sockperf "$MODE" --tcp -i 127.0.0.1 -p "$1" -m "$MSG" -t "$T" $EXTRA 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
    awk '
        /Total [0-9]+ observations/ { for (i=1;i<=NF;i++) if ($i=="Total") obs=$(i+1) }
        /avg-latency=/ { split($0,a,"avg-latency="); split(a[2],b," "); avg=b[1] }
        /percentile 50.000/ { p50=$NF } /percentile 99.000/ { p99=$NF }
        /percentile 99.900/ { p999=$NF } /percentile 99.990/ { p9999=$NF }
        /<MAX> observation/ { max=$NF }
        /dropped messages/ { gsub(/;/,""); for (i=1;i<=NF;i++) { if ($i=="dropped") d=$(i+3); if ($i=="duplicated") u=$(i+3); if ($i=="out-of-order") o=$(i+3) } }
        END { printf "%s %s %s %s %s %s %s %s %s %s\n", obs, avg, p50, p99, p999, p9999, max, d, u, o }
    ' <<<"$out"
}

echo "# sockperf $MODE --tcp -m $MSG -t $T $EXTRA   ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "| run | server | observations | avg µs | p50 µs | p99 µs | p99.9 µs | p99.99 µs | max µs | dropped/dup/ooo |"
echo "|---|---|---|---|---|---|---|---|---|---|"
A_MEDIANS=()
T_MEDIANS=()
for r in $(seq 1 "$ROUNDS"); do
    for who in anchor tidegate; do
        if [ "$who" = anchor ]; then port=$ANCHOR_PORT; name="sockperf server"; else port=$TG_PORT; name="tidegate [sockperf]"; fi
        read -r obs avg p50 p99 p999 p9999 max d u o <<<"$(run "$port")"
        echo "| $r | $name | $obs | $avg | $p50 | $p99 | $p999 | $p9999 | $max | $d/$u/$o |"
        if [ "$who" = anchor ]; then A_MEDIANS+=("$p50"); else T_MEDIANS+=("$p50"); fi
    done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END { if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2 }'; }
A=$(median "${A_MEDIANS[@]}")
TG=$(median "${T_MEDIANS[@]}")
echo
echo "median one-way latency: sockperf server $A µs, tidegate $TG µs, ratio tidegate/anchor = $(awk -v a="$A" -v t="$TG" 'BEGIN { printf "%.3f", t/a }')"
