#!/usr/bin/env bash
# The same-run anchor of `tidegate bench kv --anchor nginx`: Debian's nginx,
# started by the bench itself with its own configuration (one `return 200;`
# location on a loopback port). Idempotent: apt-get only when it is missing.
# The package's own service is left stopped: the bench runs its own nginx.
set -euo pipefail

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d: keep the package's post-install from starting a system nginx on :80.
  rc=/usr/sbin/policy-rc.d
  if [ ! -e "$rc" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$rc"
    chmod +x "$rc"
    trap 'rm -f "$rc"' EXIT
  fi
  apt-get install -y -qq --no-install-recommends nginx
fi
