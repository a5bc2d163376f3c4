#!/usr/bin/env bash
# The forwarding backends against real inference servers: sets each one up
# (tests/backends/setup-NAME.sh, cached under ${MLPN_CACHE:-~/.cache/mlperf-net})
# and runs its ignored tests (tests/tests/backend_NAME.rs).
#
# Usage: tests/backends/run.sh [kserve] [openai]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/../.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(kserve openai)
cargo build -p sut-node -p loadgen-node --bins
for name in "${names[@]}"; do
    # shellcheck source=/dev/null
    source "tests/backends/setup-$name.sh"
    cargo test -p e2e-tests --test "backend_$name" -- --ignored --nocapture --test-threads 1
done
