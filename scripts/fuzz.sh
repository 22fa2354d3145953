#!/usr/bin/env bash
# Runs every cargo-fuzz target of the workspace (each crate's fuzz/ folder)
# for at most FUZZ_RUNS inputs (default 1,000,000) and SECONDS (default 30)
# each, stopping at the first crash. The fuzz crates share one target
# directory, so their dependencies build once.
#   bash scripts/fuzz.sh          # what CI runs
#   bash scripts/fuzz.sh 600      # up to 600 s per target (still FUZZ_RUNS inputs)
#   FUZZ_SEED=0 FUZZ_RUNS=-1 bash scripts/fuzz.sh 600   # a hunt down new paths: random seed, no input cap
# The search is fixed by default: mutation seed FUZZ_SEED (default 1), the
# committed seeds only (in a fresh clone fuzz/corpus/ is empty) and an input
# count cap. libFuzzer with a fixed seed walks the same inputs in the same
# order, so a run on any machine walks a prefix of that same search: a faster
# machine stops at the same FUZZ_RUNS inputs, a slower one earlier at SECONDS.
# (With a time cap alone, CI's faster machine once walked further than any
# run here and found a crash nobody had seen.) Hunts with other seeds find
# new paths; each input they find goes into fuzz/seeds/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
seed="${FUZZ_SEED:-1}"
runs="${FUZZ_RUNS:-1000000}"
bash scripts/setup/fuzz.sh
export CARGO_TARGET_DIR="$PWD/target/fuzz"
ran=0
for fuzz_dir in crates/*/fuzz; do
  crate_dir="$(dirname "$fuzz_dir")"
  for target in $(cd "$crate_dir" && cargo +nightly fuzz list); do
    echo "== fuzz $crate_dir $target for ${secs}s or $runs inputs (seed $seed)"
    seeds=()
    [ -d "$fuzz_dir/seeds/$target" ] && seeds=("$PWD/$fuzz_dir/seeds/$target")
    mkdir -p "$fuzz_dir/corpus/$target"
    (cd "$crate_dir" && cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
      -max_total_time="$secs" -runs="$runs" -seed="$seed" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
    ran=$((ran + 1))
  done
done
if [ "$ran" -eq 0 ]; then
  echo "no fuzz target found" >&2
  exit 1
fi
echo "== fuzzed $ran targets, ${secs}s or $runs inputs each, no crash"
