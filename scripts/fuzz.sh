#!/usr/bin/env bash
# Runs every cargo-fuzz target of the repository (the one fuzz crate,
# fuzz/Cargo.toml; each target's source and seeds in crates/<crate>/fuzz/)
# for at most FUZZ_RUNS inputs (default 1,000,000) and SECONDS (default 30)
# each, stopping at the first crash. One crate, so the dependencies build
# once for all targets.
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
# new paths; each input they find goes into crates/<crate>/fuzz/seeds/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
seed="${FUZZ_SEED:-1}"
runs="${FUZZ_RUNS:-1000000}"
bash scripts/setup/fuzz.sh
export CARGO_TARGET_DIR="$PWD/target/fuzz"
ran=0
# One fuzz crate (fuzz/Cargo.toml) holds every target, so its dependencies
# build once; each target's source and seeds live in crates/<crate>/fuzz/.
for target in $(cargo +nightly fuzz list); do
  src=(crates/*/fuzz/fuzz_targets/"$target".rs)
  fuzz_dir="$(dirname "$(dirname "${src[0]}")")"
  echo "== fuzz $fuzz_dir $target for ${secs}s or $runs inputs (seed $seed)"
  seeds=()
  [ -d "$fuzz_dir/seeds/$target" ] && seeds=("$fuzz_dir/seeds/$target")
  mkdir -p "fuzz/corpus/$target"
  cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$secs" -runs="$runs" -seed="$seed" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
  ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
  echo "no fuzz target found" >&2
  exit 1
fi
echo "== fuzzed $ran targets, ${secs}s or $runs inputs each, no crash"
