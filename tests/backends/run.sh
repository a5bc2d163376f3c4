#!/usr/bin/env bash
# The real-model tests of the in-process backends, ignored by the default
# suite: for each backend (all with a setup-NAME.sh here, or those named as
# arguments, e.g. `tests/backends/run.sh onnx`), source its setup script,
# then run the ignored tests of tests/tests/backend_NAME.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)/..
if [ "$#" -gt 0 ]; then
    names=("$@")
else
    names=()
    for setup in backends/setup-*.sh; do
        name=${setup#backends/setup-}
        names+=("${name%.sh}")
    done
fi
cd "$root"
cargo build --bins
for name in "${names[@]}"; do
    echo "== backend $name" >&2
    # shellcheck source=/dev/null
    source "tests/backends/setup-$name.sh"
    cargo test -p e2e-tests --test "backend_$name" -- --ignored --test-threads 1
done
