#!/usr/bin/env bash
# The main job on one machine: a LoadGen node driving three sut-nodes
# (synthetic backend) over gRPC on 127.0.0.1, with built-in defaults: ResNet50,
# Server scenario, a synthetic data set of ResNet50-sized inputs. The MLPerf
# logs go to out/ (or $OUT_DIR). $MODEL picks another benchmark (the nodes
# serve it, and size their message limit from its inputs). Extra arguments
# go to loadgen-node, e.g.
#   deploy/run-local.sh --scenario Offline --set target_qps=20000
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-out}
model=${MODEL:-resnet50}
nodes=${NODES:-3}
base_port=${BASE_PORT:-50151}

cargo build --release --bin loadgen-node --bin sut-node

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

sut=""
for i in $(seq 1 "$nodes"); do
    port=$((base_port + i - 1))
    ready=$(mktemp)
    RUST_LOG=warn target/release/sut-node serve --listen "127.0.0.1:$port" \
        --name "local-$i" --benchmark "$model" --backend synthetic --service-time fixed:100 \
        --max-batch-size 8 --max-batch-wait-us 200 >"$ready" &
    pids+=($!)
    # Wait for the node's ready line (it loads and warms up first).
    for _ in $(seq 1 100); do
        grep -q " ready on " "$ready" && break
        kill -0 "${pids[-1]}" 2>/dev/null || { echo "sut-node local-$i failed to start" >&2; exit 1; }
        sleep 0.1
    done
    grep -q " ready on " "$ready" || { echo "sut-node local-$i is not ready" >&2; exit 1; }
    rm -f "$ready"
    sut="${sut:+$sut,}127.0.0.1:$port"
done

target/release/loadgen-node --sut "$sut" --benchmark "$model" --scenario Server \
    --mode PerformanceOnly --set target_qps=200 --set min_duration=10000 \
    --total-sample-count 1024 --no-trace --output-dir "$out/server" "$@"
echo "MLPerf logs: $out/server"
