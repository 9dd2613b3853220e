#!/usr/bin/env bash
# Runs every fuzz target of plexus-sharding for N seconds each (default 15); see
# .ci/fuzz-short.
#   usage: crates/plexus-sharding/fuzz/run-short.sh [SECONDS]
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../../.ci/fuzz-short" "$here" "$@"
