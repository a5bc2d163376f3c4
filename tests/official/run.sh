#!/usr/bin/env bash
# The official engine's tests: fetches and checks the official LoadGen 6.0.17
# sources (deploy/official-loadgen.sh), builds loadgen-node with them, and
# runs the end-to-end tests of `--engine official` and the cross-check of
# both engines (tests/tests/official.rs). Also checks that a tree with an
# altered file is reported, and one with a missing file refused, by name.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=6.0.17
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mlperf-net/loadgen-$version
src=${MLPERF_LOADGEN_SRC:-$cache/mlcommons_loadgen-$version}
MLPERF_LOADGEN_SRC=${MLPERF_LOADGEN_SRC:-} deploy/official-loadgen.sh --profile dev >/dev/null
export MLPERF_LOADGEN_SRC=$src

# A tree with one file missing: the build says which.
bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
cp -r "$src" "$bad/tree"
rm "$bad/tree/results.cc"
if MLPERF_LOADGEN_SRC=$bad/tree cargo build -q -p loadgen-cli --features official-loadgen \
        --target-dir "$bad/target" 2>"$bad/err"; then
    echo "FAILED: a tree without results.cc was accepted" >&2; exit 1
fi
grep -q "results.cc is missing from the LoadGen tree" "$bad/err" \
    || { echo "FAILED: the missing file is not named:" >&2; cat "$bad/err" >&2; exit 1; }
echo "ok: a tree with a missing file is refused, naming it"

# A tree with one file altered: it builds, and the binary says which file
# differs (at --version and at every run).
rm -rf "$bad/tree" && cp -r "$src" "$bad/tree"
echo "// altered" >>"$bad/tree/loadgen.cc"
MLPERF_LOADGEN_SRC=$bad/tree cargo build -q -p loadgen-cli --features official-loadgen 2>/dev/null
target/debug/loadgen-node --version | grep -q "DOES NOT MATCH.*loadgen.cc differs" \
    || { echo "FAILED: the altered file is not reported:" >&2; target/debug/loadgen-node --version >&2; exit 1; }
echo "ok: a tree with an altered file is reported, naming it"

cargo clippy -p loadgen-cli -p tests --features tests/official-loadgen --all-targets -- -D warnings
cargo build --bins -p loadgen-cli -p sut-node --features loadgen-cli/official-loadgen
cargo test -p tests --features official-loadgen --test official "$@"
# The walk of tests/tests/benchmark_walk.rs with the official engine, for
# four benchmarks (gpt-oss-120b, dlrm-v3, llama3.1-8b, resnet); the
# official checker on each tree when MLPERF_INFERENCE_DIR is set.
cargo test -p tests --features official-loadgen --test benchmark_walk official_engine "$@"
