#!/usr/bin/env bash
# cargo-fuzz and the nightly toolchain it needs (libFuzzer's sanitizer
# coverage flags are nightly-only), for scripts/fuzz.sh. Idempotent.
set -euo pipefail
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
