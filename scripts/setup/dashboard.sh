#!/usr/bin/env bash
# The browser crates/tidegate/tests/dashboard.rs drives: Debian's `chromium`
# (apt) and npm `playwright-core` (pinned by
# crates/tidegate/tests/js/package-lock.json, installed into its
# node_modules). playwright-core only drives the browser: it never downloads
# one (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD). Idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/../.."

need=()
dpkg -s chromium >/dev/null 2>&1 || need+=(chromium)
# Node may come from elsewhere (nodesource, a tarball): apt only without one.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
js=crates/tidegate/tests/js
if [ ! -d "$js/node_modules/playwright-core" ] \
  || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
fi
test -x /usr/bin/chromium
