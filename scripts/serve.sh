#!/usr/bin/env bash
# README's first command: build and run `tidegate serve` on a fresh machine.
# Installs the build tools librdkafka needs (idempotent, fast when present),
# then runs the release binary with any arguments given (e.g. --config FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup/00-base.sh
exec cargo run --release -p tidegate -- serve "$@"
