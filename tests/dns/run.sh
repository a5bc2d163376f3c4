#!/usr/bin/env bash
# `--sut dns://NAME:PORT` and `--sut-file` against a real DNS server:
# Debian's dnsmasq (the dnsmasq-base package: the server alone, no service
# started) answers for names with several loopback records, and loadgen-node
# resolves them through the host's resolver in a mount namespace whose
# /etc/resolv.conf names that server (tests/tests/discovery.rs). Needs root;
# skips, saying so, where dnsmasq cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v dnsmasq >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsmasq-base) \
        >/dev/null 2>&1 || true
fi
bin=$(command -v dnsmasq || true)
if [ -z "$bin" ]; then
    echo "dns discovery test: skipped (the dnsmasq-base package cannot be installed here)"
    exit 0
fi
echo "dns discovery test: $("$bin" --version | head -1)"
cargo build -p sut-node -p loadgen-cli --bins
DNSMASQ_BIN="$bin" cargo test -p tests --test discovery -- --nocapture
