#!/usr/bin/env bash
# Two Tidegate servers side by side under the same S2S load at the same
# time: server A and server B each get their own ports and their own
# `bench s2s --target` client, both started together, so whatever the shared
# host does during a round hits both alike. The ports swap every round and
# so does which server and client start first. Sequential rounds on this
# machine favour whichever build runs first (measured: the same binary +10 %
# p50 against itself), so use this to compare two builds, not alternation.
#
# Prints the confirm phase (client FINISH -> server CONFIRM) of each side per
# round and B/A, then the medians of B/A.
#
#   scripts/bench/s2s-side-by-side.sh OLD_TIDEGATE NEW_TIDEGATE
#   ROUNDS=8 TX=10 TRANSPORT=http scripts/bench/s2s-side-by-side.sh A B
#   LOG_B=warn scripts/bench/s2s-side-by-side.sh T T     # one binary, two log levels
#   CLIENT=/path/to/tidegate ...                        # the bench client (default: B)
set -euo pipefail

[ $# -eq 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
A=$1
B=$2
ROUNDS=${ROUNDS:-6}
TX=${TX:-10}
CLIENTS=${CLIENTS:-1000}
TRANSPORT=${TRANSPORT:-raw}
CLIENT=${CLIENT:-$B}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# Ports: side 1 on 18180/18181, side 2 on 18280/18281.
for side in 1 2; do
    cat > "$WORK/side$side.toml" <<EOF
[http]
listen = "127.0.0.1:18${side}80"
[s2s]
listen = "127.0.0.1:18${side}81"
[forward]
enabled = false
[wire]
enabled = false
[sockperf]
enabled = false
EOF
done

wait_healthy() {
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0
        sleep 0.1
    done
    echo "server on :$1 did not start" >&2
    return 1
}

confirm() { # json-file -> "p50 mean"
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["extra"]["phases_us"]["confirm"]; print(c["p50"], c["mean"])' "$1"
}

for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 )); then sa=1; sb=2; else sa=2; sb=1; fi
    start_a() { RUST_LOG=${LOG_A:-info} "$A" serve --config "$WORK/side$sa.toml" >"$WORK/a.log" 2>&1 & PA=$!; }
    start_b() { RUST_LOG=${LOG_B:-info} "$B" serve --config "$WORK/side$sb.toml" >"$WORK/b.log" 2>&1 & PB=$!; }
    if (( r % 2 )); then start_a; start_b; else start_b; start_a; fi
    wait_healthy "18${sa}80"
    wait_healthy "18${sb}80"
    load() { "$CLIENT" bench s2s --target "127.0.0.1:18${1}80" --clients "$CLIENTS" --tx "$TX" \
        --packets 5 --transport "$TRANSPORT" --json 2>/dev/null | tail -1 >"$WORK/$2.$r.json"; }
    if (( r % 2 )); then load "$sa" a & CA=$!; load "$sb" b & CB=$!; else load "$sb" b & CB=$!; load "$sa" a & CA=$!; fi
    wait "$CA" "$CB"
    kill "$PA" "$PB"
    wait "$PA" "$PB" 2>/dev/null || true
    read -r a50 amean < <(confirm "$WORK/a.$r.json")
    read -r b50 bmean < <(confirm "$WORK/b.$r.json")
    python3 -c 'import sys; a50,am,b50,bm=map(float,sys.argv[2:]); print("round %s: A p50 %.1f mean %.1f | B p50 %.1f mean %.1f | B/A p50 %.3f mean %.3f"%(sys.argv[1],a50,am,b50,bm,b50/a50,bm/am))' \
        "$r" "$a50" "$amean" "$b50" "$bmean" | tee -a "$WORK/rounds"
done
python3 - "$WORK/rounds" <<'EOF'
import re, statistics, sys
p50, mean = [], []
for line in open(sys.argv[1]):
    m = re.search(r"B/A p50 ([\d.]+) mean ([\d.]+)", line)
    p50.append(float(m.group(1))); mean.append(float(m.group(2)))
print("B/A over %d rounds: p50 median %.3f (geometric mean %.3f), mean median %.3f (geometric mean %.3f)" % (
    len(p50), statistics.median(p50), statistics.geometric_mean(p50),
    statistics.median(mean), statistics.geometric_mean(mean)))
EOF
