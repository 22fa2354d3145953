#!/usr/bin/env bash
# Installs what the wire crate's tests need: the stock Debian `sockperf`
# client/server (the real peer of the [sockperf] echo listener).
set -euo pipefail

if command -v sockperf >/dev/null 2>&1; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

if ! apt-cache show sockperf >/dev/null 2>&1; then
    $SUDO apt-get update
fi
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sockperf
command -v sockperf >/dev/null
