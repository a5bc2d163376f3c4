#!/usr/bin/env bash
# The HTML pages (loadgen-node --report, report DIR, compare --report, sweep)
# in a real headless browser, Debian's chromium (tests/tests/report.rs).
# Skips, saying so, where chromium cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
        >/dev/null 2>&1 || true
fi
bin=$(command -v chromium || true)
if [ -z "$bin" ]; then
    echo "report browser test: skipped (the chromium package cannot be installed here)"
    exit 0
fi
echo "report browser test: $("$bin" --version 2>/dev/null | head -1)"
cargo build -p sut-node -p loadgen-cli --bins
CHROMIUM_BIN="$bin" cargo test -p tests --test report -- --nocapture
