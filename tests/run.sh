#!/usr/bin/env bash
# The whole default test suite: unit tests, conformance replays of the official
# LoadGen's reference runs, and end-to-end runs across processes on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --bins
cargo test --workspace "$@"
