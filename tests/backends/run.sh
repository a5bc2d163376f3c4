#!/usr/bin/env bash
# End-to-end tests of the backends on real models, outside the default suite:
# fetches what each backend needs (tests/backends/setup-NAME.sh, cached), then
# runs the ignored tests of tests/tests/backend_NAME.rs.
#   tests/backends/run.sh            # every backend with a setup script
#   tests/backends/run.sh llm        # only these
set -euo pipefail
cd "$(dirname "$0")/../.."
backends=("$@")
if [ ${#backends[@]} -eq 0 ]; then
    for setup in tests/backends/setup-*.sh; do
        name="${setup#tests/backends/setup-}"
        backends+=("${name%.sh}")
    done
fi
cargo build -p sut-node -p loadgen-node --bins
for backend in "${backends[@]}"; do
    # shellcheck source=/dev/null
    source "tests/backends/setup-$backend.sh"
    cargo test -p e2e-tests --test "backend_$backend" -- --ignored --test-threads 1
done
