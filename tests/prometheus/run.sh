#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus` package) scraping sut-node and
# loadgen-node `--metrics` during a run, queried through its HTTP API
# (tests/tests/prometheus.rs). Skips, saying so, where Prometheus cannot be
# installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus) \
        >/dev/null 2>&1 || true
fi
bin=$(command -v prometheus || true)
if [ -z "$bin" ]; then
    echo "prometheus test: skipped (the prometheus package cannot be installed here)"
    exit 0
fi
echo "prometheus test: $("$bin" --version 2>&1 | head -1)"
cargo build -p sut-node -p loadgen-cli --bins
PROMETHEUS_BIN="$bin" cargo test -p tests --test prometheus -- --nocapture
