#!/usr/bin/env bash
# Runs every fuzz target of plexus-cluster for N seconds each (default 15).
# Installs cargo-fuzz if missing. Needs a nightly toolchain (rustup).
#   usage: crates/plexus-cluster/fuzz/run-short.sh [SECONDS]
set -euo pipefail
secs="${1:-15}"
cd "$(dirname "$0")"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for t in $(cargo +nightly fuzz list); do
    echo "== fuzz $t for ${secs}s"
    cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
echo "all fuzz targets ran ${secs}s without crash"
