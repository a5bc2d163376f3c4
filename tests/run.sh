#!/usr/bin/env bash
# The whole default test suite: unit tests, conformance replays of the official
# LoadGen's reference runs, and end-to-end runs across processes on 127.0.0.1.
#
# Every test's scratch lives under one directory of this run (TMPDIR): each
# test removes its own when it passes, and the directory goes when the suite
# passes; when it fails, the directory is kept and its path printed. A suite
# that passes but leaves anything behind, there or in /tmp, fails, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --bins
outer=${TMPDIR:-/tmp}
run_tmp=$(mktemp -d "$outer/mlperf-net-suite.XXXXXX")
before=$(mktemp "$outer/mlperf-net-suite-before.XXXXXX")
ls -A /tmp | sort >"$before"
status=0
TMPDIR=$run_tmp cargo test --workspace "$@" || status=$?
if [ "$status" -ne 0 ]; then
    rm -f "$before"
    echo "tests/run.sh: the tests' scratch is kept in $run_tmp" >&2
    exit "$status"
fi
left=$(cd "$run_tmp" && ls -A)
new_in_tmp=$(ls -A /tmp | sort | comm -13 "$before" - | grep -vx "$(basename "$run_tmp")" || true)
rm -f "$before"
if [ -n "$left" ] || [ -n "$new_in_tmp" ]; then
    echo "tests/run.sh: the tests passed but left scratch behind:" >&2
    [ -z "$left" ] || printf '  %s\n' $left | sed "s#^  #  $run_tmp/#" >&2
    [ -z "$new_in_tmp" ] || printf '  /tmp/%s\n' $new_in_tmp >&2
    exit 1
fi
rmdir "$run_tmp"
