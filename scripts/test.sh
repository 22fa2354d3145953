#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs every real peer the
# tests use (each area's scripts/setup/*.sh is idempotent), checks formatting
# and lints, then runs every test. This is README.md's test command and what
# .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1

for setup in scripts/setup/*.sh; do
  echo "== setup: $setup ($(date -u +%T))"
  bash "$setup"
done

# Make anything the setup scripts put on PATH visible here too.
if [ -f .cache/env.sh ]; then
  # shellcheck disable=SC1091
  . .cache/env.sh
fi

echo "== cargo fmt --check ($(date -u +%T))"
cargo fmt --all -- --check
echo "== cargo clippy ($(date -u +%T))"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo doc ($(date -u +%T))"
# Every public item is documented; its links must resolve.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== cargo test ($(date -u +%T))"
cargo test --workspace --no-fail-fast
# Our S2S sink and the stock NiFi client against a real Apache NiFi
# (downloaded from Maven Central): interop checked both ways, not only
# against our own server. The debug binary cargo test just built serves.
echo "== interop: a real Apache NiFi ($(date -u +%T))"
CLIENTS="" BENCH_HTTP_CLIENTS="" SINK_EVENTS=2000 TIDEGATE_BIN="$PWD/target/debug/tidegate" \
  bash scripts/interop/nifi.sh
echo "== fuzz (every target, 30 s each) ($(date -u +%T))"
bash scripts/fuzz.sh 30
echo "== all passed ($(date -u +%T))"
