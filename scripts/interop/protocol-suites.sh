#!/usr/bin/env bash
# The Engine.IO and Socket.IO protocols' own test suites (the `test-suite/`
# folders of github.com/socketio/engine.io-protocol and
# github.com/socketio/socket.io-protocol, mocha + ws + node-fetch) against
# `tidegate serve` in `[push] conformance = true` mode, with the timings
# the suites expect: pingInterval 300, pingTimeout 200, maxPayload 1000000,
# on localhost:3000 (the port is fixed in the suites).
#
#   git clone https://github.com/socketio/engine.io-protocol /tmp/eio
#   git clone https://github.com/socketio/socket.io-protocol /tmp/sio
#   bash scripts/interop/protocol-suites.sh /tmp/eio /tmp/sio [runs]
#
# Neither suite is vendored here (nor is it on a package registry, so CI
# cannot fetch it); what they check that our own tests must keep is in
# crates/push/tests (engineio_errors.rs, conformance.rs). Runs each suite
# `runs` times (default 3: several of its checks are races between
# requests sent at once) and exits 1 if any run failed. Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")/../.."
eio="${1:?engine.io-protocol checkout}"
sio="${2:?socket.io-protocol checkout}"
runs="${3:-3}"
bin="${TIDEGATE_BIN:-target/release/tidegate}"
[ -x "$bin" ] || cargo build --release -p tidegate
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
cat >"$work/tidegate.toml" <<TOML
[http]
listen = "127.0.0.1:3000"
[wire]
enabled = false
[sockperf]
enabled = false
[forward]
enabled = false
[s2s]
enabled = false
[push]
conformance = true
ping_interval_ms = 300
ping_timeout_ms = 200
max_payload = 1000000
TOML
"$bin" serve --config "$work/tidegate.toml" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 50); do
    curl -sf http://127.0.0.1:3000/healthz >/dev/null && break
    sleep 0.1
done
curl -sf http://127.0.0.1:3000/healthz >/dev/null || { cat "$work/serve.log"; exit 1; }
failed=0
for suite in "$eio" "$sio"; do
    (cd "$suite/test-suite" && npm install --no-audit --no-fund --silent >/dev/null)
    for i in $(seq "$runs"); do
        if (cd "$suite/test-suite" && timeout 300 npx mocha test-suite.js >"$work/run.log" 2>&1); then
            echo "$(basename "$suite") run $i: $(grep -E 'passing' "$work/run.log" | xargs)"
        else
            echo "$(basename "$suite") run $i FAILED:"
            sed -n '/failing/,$p' "$work/run.log" | head -40
            failed=1
        fi
    done
done
exit "$failed"
