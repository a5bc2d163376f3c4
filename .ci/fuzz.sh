#!/usr/bin/env bash
# A short run of every fuzz target (tests/fuzz/fuzz_targets: the config parser, the
# .npy reader, the frame decoder of both transports, the protobuf messages of both
# directions, the codecs' decoders, the SSE parser, the Probe and Describe
# requests as a node reads and answers them), FUZZ_SECONDS each
# (default 10). Needs a nightly toolchain and cargo-fuzz; they are installed
# when missing, and the step is skipped, saying so, where they cannot be.
# With --build-only it stops once the targets are built (.ci/run does that
# part early, in the background). For long runs, see docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-10}
build_only=false
case "${1:-}" in
    --build-only) build_only=true ;;
    "") ;;
    *) echo "usage: .ci/fuzz.sh [--build-only]" >&2; exit 2 ;;
esac

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || {
        echo "fuzz: skipped (no nightly toolchain and none could be installed)"
        exit 0
    }
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked >/dev/null 2>&1 || {
        echo "fuzz: skipped (cargo-fuzz could not be installed)"
        exit 0
    }
fi
# Built without optimisations (--dev): a third of a release build's compile
# time, and ten seconds a target need no more; long runs are release builds.
fuzz=(--fuzz-dir tests/fuzz)
cargo +nightly fuzz build "${fuzz[@]}" --dev
if $build_only; then
    echo "fuzz: every target built"
    exit 0
fi
for target in $(cargo +nightly fuzz list "${fuzz[@]}"); do
    echo "fuzz: $target for ${seconds} s"
    cargo +nightly fuzz run "${fuzz[@]}" --dev "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
echo "fuzz: every target ran ${seconds} s without a finding"
