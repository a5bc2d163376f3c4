#!/usr/bin/env bash
# Builds loadgen-node and sut-node, then the two container images:
#   ${IMAGE_PREFIX:-mlperf-net}/loadgen-node:${IMAGE_TAG:-latest}
#   ${IMAGE_PREFIX:-mlperf-net}/sut-node:${IMAGE_TAG:-latest}
# Both are FROM scratch: the build context is a root file system holding only
# the binary (and, for a glibc build, the shared libraries and loader that
# `ldd` lists), /etc/passwd and /etc/group; nothing comes from a registry.
# The images run as user 65532 (mlperf).
#
# Usage: deploy/build-images.sh [--libc glibc|musl] [--profile release|debug]
#                               [--no-build]
#   --libc glibc  (default) the host's glibc build, with its libraries copied
#                 into the image;
#   --libc musl   a static x86_64-unknown-linux-musl build (the target is
#                 added with rustup if missing; needs a musl C compiler,
#                 Debian's musl-tools; without either, falls back to glibc).
#                 Smaller, but musl's allocator costs throughput on the
#                 network path (see docs/deploy.md).
#   --profile     cargo profile (default release; debug reuses the test
#                 build);
#   --no-build    package the binaries already in the target directory;
#   --official-loadgen
#                 loadgen-node with the official LoadGen compiled in
#                 (`--engine official`; sources fetched and checked by
#                 deploy/official-loadgen.sh, or MLPERF_LOADGEN_SRC); glibc
#                 only.
# The cargo target directory is the workspace's usual one (CARGO_TARGET_DIR
# and cargo config honoured), so builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

libc=${LIBC:-glibc}
profile=${PROFILE:-release}
build=1
official=0
while [ $# -gt 0 ]; do
    case "$1" in
    --libc) libc=$2; shift 2 ;;
    --libc=*) libc=${1#--libc=}; shift ;;
    --profile) profile=$2; shift 2 ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    --no-build) build=0; shift ;;
    --official-loadgen) official=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-images.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$libc" in glibc | musl) ;; *) echo "build-images.sh: --libc is glibc or musl, not '$libc'" >&2; exit 2 ;; esac
case "$profile" in release | debug) ;; *) echo "build-images.sh: --profile is release or debug, not '$profile'" >&2; exit 2 ;; esac

prefix=${IMAGE_PREFIX:-mlperf-net}
tag=${IMAGE_TAG:-latest}
musl_target=x86_64-unknown-linux-musl

command -v docker >/dev/null 2>&1 || { echo "build-images.sh: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build-images.sh: no Docker engine answers (docker info failed)" >&2; exit 1; }

if [ "$libc" = musl ] && ! rustup target list --installed 2>/dev/null | grep -qx "$musl_target"; then
    echo "build-images.sh: adding the $musl_target target with rustup" >&2
    if ! rustup target add "$musl_target" >&2; then
        echo "build-images.sh: cannot add $musl_target: building glibc images instead" >&2
        libc=glibc
    fi
fi

# ring and zstd compile C code: a musl build needs a C compiler for musl.
if [ "$libc" = musl ] && [ -z "${CC_x86_64_unknown_linux_musl:-}" ] &&
    ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1; then
    if command -v musl-gcc >/dev/null 2>&1; then
        export CC_x86_64_unknown_linux_musl=musl-gcc
    else
        echo "build-images.sh: no C compiler for musl (x86_64-linux-musl-gcc or musl-gcc; Debian: apt-get install musl-tools): building glibc images instead" >&2
        libc=glibc
    fi
fi

if [ "$official" = 1 ]; then
    [ "$libc" = glibc ] || { echo "build-images.sh: --official-loadgen needs --libc glibc (the LoadGen is C++)" >&2; exit 2; }
    MLPERF_LOADGEN_SRC=$(deploy/official-loadgen.sh --src-only)
    export MLPERF_LOADGEN_SRC
fi

target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || { echo "build-images.sh: cannot find cargo's target directory" >&2; exit 1; }
# Release images carry every backend (the heavy ones are features).
cargo_flags=(--bin loadgen-node --bin sut-node --features sut-node/llm,sut-node/onnx)
[ "$profile" = release ] && cargo_flags+=(--release)
[ "$official" = 1 ] && cargo_flags+=(--features loadgen-cli/official-loadgen)
if [ "$libc" = musl ]; then
    cargo_flags+=(--target "$musl_target")
    bin_dir=$target_dir/$musl_target/$profile
else
    bin_dir=$target_dir/$profile
fi
if [ "$build" = 1 ]; then
    echo "build-images.sh: cargo build ${cargo_flags[*]}" >&2
    cargo build "${cargo_flags[@]}"
fi
for b in loadgen-node sut-node; do
    [ -x "$bin_dir/$b" ] || { echo "build-images.sh: $bin_dir/$b is missing" >&2; exit 1; }
done
# The sut-node image's HEALTHCHECK runs `sut-node health`.
if ! "$bin_dir/sut-node" health --help >/dev/null 2>&1; then
    echo "build-images.sh: $bin_dir/sut-node has no 'health' subcommand, which the image's HEALTHCHECK needs" >&2
    exit 1
fi

# The legacy builder when BuildKit's buildx plugin is absent (Debian's
# docker.io without docker-buildx): both read the same Dockerfiles.
if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Fills $1 (a build context) with a root file system for binary $2.
rootfs() {
    local ctx=$1 bin=$2 fs=$1/rootfs
    mkdir -p "$fs/usr/local/bin" "$fs/etc" "$ctx/out"
    cp "$bin_dir/$bin" "$fs/usr/local/bin/$bin"
    # Debug info is most of the file; symbols stay for backtraces.
    if command -v strip >/dev/null 2>&1; then strip --strip-debug "$fs/usr/local/bin/$bin"; fi
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
        'mlperf:x:65532:65532:mlperf-net:/nonexistent:/sbin/nologin' >"$fs/etc/passwd"
    printf '%s\n' 'root:x:0:' 'mlperf:x:65532:' >"$fs/etc/group"
    if [ "$libc" = glibc ]; then
        # The loader and every library the binary loads, at the same paths.
        local libs
        libs=$(ldd "$fs/usr/local/bin/$bin" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }')
        [ -n "$libs" ] || { echo "build-images.sh: ldd lists no libraries for $bin" >&2; exit 1; }
        for lib in $libs; do
            mkdir -p "$fs$(dirname "$lib")"
            cp -L "$lib" "$fs$lib"
        done
        # glibc 2.34+ has the files and dns lookups built in.
        printf '%s\n' 'hosts: files dns' >"$fs/etc/nsswitch.conf"
    elif ldd "$fs/usr/local/bin/$bin" 2>&1 | grep -q '=>'; then
        echo "build-images.sh: the musl $bin is not statically linked" >&2
        exit 1
    fi
}

for bin in loadgen-node sut-node; do
    ctx=$work/$bin
    rootfs "$ctx" "$bin"
    image=$prefix/$bin:$tag
    old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    echo "build-images.sh: building $image ($libc, $profile)" >&2
    if ! docker build -f "deploy/$bin.Dockerfile" -t "$image" \
        --label "org.opencontainers.image.title=$bin" \
        --label "mlperf-net.libc=$libc" --label "mlperf-net.profile=$profile" \
        --label "mlperf-net.official-loadgen=$official" \
        "$ctx" >"$work/$bin.log" 2>&1; then
        cat "$work/$bin.log" >&2
        echo "build-images.sh: docker build of $image failed" >&2
        exit 1
    fi
    # The image this tag named before, unless something still uses it.
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
    docker image ls "$image" --format "{{.Repository}}:{{.Tag}}  {{.Size}}"
done

# The compose file's default log directory, writable by the images' user.
mkdir -p deploy/out
chmod 0777 deploy/out 2>/dev/null || true
