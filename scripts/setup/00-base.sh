#!/usr/bin/env bash
# Build tools every crate needs: a C toolchain and cmake (librdkafka is built
# from source by rdkafka's cmake-build feature, and its cmake build includes
# curl/curl.h even with curl off, hence libcurl4-openssl-dev), rustfmt and
# clippy. scripts/serve.sh runs this too, so `tidegate serve` builds on a
# fresh machine.
set -euo pipefail

need=()
for pkg in cmake g++ make pkg-config zlib1g-dev libssl-dev libcurl4-openssl-dev curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
