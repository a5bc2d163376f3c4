#!/usr/bin/env bash
# Builds loadgen-node with the official LoadGen compiled in (`--engine
# official`, the engine of runs to be submitted):
#   1. fetches the official LoadGen 6.0.17 sources from PyPI (the
#      mlcommons-loadgen sdist carries the same C++ sources as the tagged
#      mlcommons/inference tree), unless MLPERF_LOADGEN_SRC names a tree
#      already (e.g. the loadgen/ folder of a tagged inference checkout);
#   2. checks every file the build uses against the published SHA-1 list
#      (loadgen-node/cli/official/loadgen-6.0.17.sha1) and stops on a
#      difference;
#   3. builds target/release/loadgen-node with the `official-loadgen`
#      feature and prints its --version.
# Extra arguments go to cargo build (e.g. --profile dev); `--src-only` stops
# after step 2 and prints the checked tree's path (for build-images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
version=6.0.17
list=loadgen-node/cli/official/loadgen-$version.sha1
profile=(--release)
src_only=0
if [ "${1:-}" = --src-only ]; then src_only=1; shift; fi
[ $# -gt 0 ] && profile=("$@")

src=${MLPERF_LOADGEN_SRC:-}
if [ -z "$src" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/mlperf-net/loadgen-$version
    src=$cache/mlcommons_loadgen-$version
    if [ ! -f "$src/loadgen.cc" ]; then
        mkdir -p "$cache"
        echo "fetching mlcommons-loadgen==$version (sources) from PyPI into $cache" >&2
        python3 -m pip download --quiet --no-binary :all: --no-deps \
            "mlcommons-loadgen==$version" -d "$cache"
        tar xzf "$cache/mlcommons_loadgen-$version.tar.gz" -C "$cache"
    fi
fi
[ -f "$src/loadgen.cc" ] || { echo "$src: not an official LoadGen tree (no loadgen.cc)" >&2; exit 1; }

echo "checking $src against $list" >&2
if ! (grep -v '^#' "$list" | awk '{print $1 "  " $2}' | (cd "$src" && sha1sum --check --quiet -)); then
    echo "the LoadGen tree at $src is not the released $version one (files above differ);" \
         "its runs could not be submitted. Point MLPERF_LOADGEN_SRC at an unaltered tree." >&2
    exit 1
fi

if [ "$src_only" = 1 ]; then
    echo "$src"
    exit 0
fi

MLPERF_LOADGEN_SRC=$src cargo build "${profile[@]}" -p loadgen-cli --features official-loadgen \
    --bin loadgen-node
# The folder cargo builds the profile into: --release and `--profile
# release` go to release/, dev to debug/, any other profile to its name.
dir=debug
case "${profile[*]}" in
    --release*) dir=release ;;
    "--profile dev"*) dir=debug ;;
    --profile\ *) dir=${profile[1]} ;;
esac
bin=target/$dir/loadgen-node
"$bin" --version
echo "built $bin with the official LoadGen from $src"
