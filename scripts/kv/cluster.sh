#!/usr/bin/env bash
# Shared by the scripts/kv/*.sh runs: a local KV cluster of release
# `tidegate serve` nodes on loopback (KV and [http] only, a fresh temporary
# data directory each), stopped and removed when the calling script exits.
# Source it, then:
#   kv_cluster_begin BASE_PORT NODES SECRET [EXTRA_KV_KEYS]
#   kv_start_node I        # start node I (0-based) and wait for /healthz
#   kv_start_nodes         # start them all
#   kv_stop_node I         # stop node I (its data directory stays)
# Sets: exe (the binary: TIDEGATE_EXE, or a fresh release build), work (the
# temporary directory: node configs, logs nodeI.log, data dataI), and
# kv_base_port. EXTRA_KV_KEYS are more lines of the [kv] section.

kv_cluster_begin() {
  kv_base_port=$1
  kv_nodes=$2
  kv_secret=$3
  kv_extra=${4:-}
  bash scripts/setup/kv.sh
  # TIDEGATE_EXE: run that binary instead of building (A/B comparisons).
  exe=${TIDEGATE_EXE:-}
  if [ -z "$exe" ]; then
    cargo build --release -q -p tidegate
    exe=target/release/tidegate
  fi
  work=$(mktemp -d)
  kv_pids=()
  trap kv_cluster_cleanup EXIT
}

kv_cluster_cleanup() {
  local p
  for p in "${kv_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

kv_node_list() {
  local urls=() i
  for i in $(seq 0 $((kv_nodes - 1))); do
    urls+=("\"http://127.0.0.1:$((kv_base_port + i))\"")
  done
  (IFS=,; echo "${urls[*]}")
}

kv_start_node() {
  local i=$1 port=$((kv_base_port + $1))
  cat > "$work/node$i.toml" <<TOML
[http]
listen = "127.0.0.1:$port"
[wire]
enabled = false
[sockperf]
enabled = false
[forward]
enabled = false
[s2s]
enabled = false
[kv]
data_dir = "$work/data$i"
self = "http://127.0.0.1:$port"
nodes = [$(kv_node_list)]
cluster_secret = "$kv_secret"
$kv_extra
TOML
  RUST_LOG=${RUST_LOG:-warn} "$exe" serve --config "$work/node$i.toml" 2>> "$work/node$i.log" &
  kv_pids[i]=$!
  local _
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return 0
    sleep 0.1
  done
  echo "node $i did not start: $(tail -3 "$work/node$i.log")" >&2
  exit 1
}

kv_start_nodes() {
  local i
  for i in $(seq 0 $((kv_nodes - 1))); do kv_start_node "$i"; done
}

kv_stop_node() {
  kill "${kv_pids[$1]}"
  wait "${kv_pids[$1]}" 2>/dev/null || true
}
