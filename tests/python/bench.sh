#!/usr/bin/env bash
# Offline throughput with 64-byte samples, side by side in one run: the
# official LoadGen (PyPI mlcommons-loadgen 6.0.17) driving mlperf_net_qdl from
# docs/examples/python_harness.py; loadgen-node's own engine through the same
# QDL; both against the same sut-nodes (synthetic backend, no service time),
# release builds. Plus the official LoadGen with a Python null SUT (answers in
# IssueQuery, no network): what its Python bindings allow at all.
#
# Usage: tests/python/bench.sh   (SAMPLES=200000 NODES=2 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${SAMPLES:-200000}
nodes=${NODES:-2}

venv=${MLPN_CACHE:-$HOME/.cache/mlperf-net}/python-qdl
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c "import mlperf_loadgen" 2>/dev/null && [ -x "$venv/bin/maturin" ] ||
    "$venv/bin/pip" install -q "maturin>=1.9.4,<2" "mlcommons-loadgen==6.0.17"
py=$venv/bin/python
VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH maturin develop -q --release -m qdl/python/Cargo.toml
cargo build -q --release -p sut-node -p loadgen-cli --bins

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

sut=""
for i in $(seq 1 "$nodes"); do
    out=$work/node-$i.out
    RUST_LOG=warn target/release/sut-node serve --listen 127.0.0.1:0 --no-quic \
        --name "bench-$i" --backend synthetic >"$out" 2>/dev/null &
    pids+=($!)
    for _ in $(seq 1 100); do grep -q " ready on " "$out" && break; sleep 0.1; done
    grep -q " ready on " "$out" || { echo "sut-node bench-$i is not ready" >&2; exit 1; }
    sut="${sut:+$sut,}$(sed -n 's/.* ready on \([^ ]*\) .*/\1/p' "$out")"
done

rate() { sed -n 's/^Samples per second: //p' "$1/mlperf_log_summary.txt"; }
settings=(--set min_duration_ms=0 --set "min_query_count=$samples" --set offline_expected_qps=1)

"$py" docs/examples/python_harness.py --sut "$sut" --scenario Offline --sample-bytes 64 \
    --output-dir "$work/python" "${settings[@]}" 2>/dev/null
target/release/loadgen-node --sut "$sut" --model resnet50 --scenario Offline \
    --mode PerformanceOnly --sample-bytes 64 --total-sample-count 1024 --no-trace \
    --set min_duration=0 --set "min_query_count=$samples" --set target_qps=1 \
    --output-dir "$work/native" >/dev/null 2>&1
"$py" - "$work/null" "$samples" <<'EOF'
import os, sys
import mlperf_loadgen as lg
out, samples = sys.argv[1], int(sys.argv[2])
def issue(qs):
    # In calls of 512: the official 6.0.17 core crashes when a thread that
    # completed 1,024 or more samples in one call exits.
    for i in range(0, len(qs), 512):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in qs[i:i + 512]])
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(1024, 1024, lambda i: None, lambda i: None)
s = lg.TestSettings()
s.FromConfig("", "resnet50", "Offline", 0)
s.scenario, s.mode = lg.TestScenario.Offline, lg.TestMode.PerformanceOnly
s.min_duration_ms, s.min_query_count, s.offline_expected_qps = 0, samples, 1
ls = lg.LogSettings()
os.makedirs(out, exist_ok=True)
ls.log_output.outdir = out
lg.StartTestWithLogSettings(sut, qsl, s, ls)
EOF

python_rate=$(rate "$work/python")
native_rate=$(rate "$work/native")
null_rate=$(rate "$work/null")
echo "Offline, $samples samples of 64 bytes, $nodes sut-nodes:"
printf '  %-52s %12s samples/s\n' \
    "official LoadGen (Python) + mlperf_net_qdl" "$python_rate" \
    "loadgen-node (native engine), same QDL" "$native_rate" \
    "official LoadGen (Python) + Python null SUT" "$null_rate"
"$py" -c "p, n, z = map(float, '$python_rate $native_rate $null_rate'.split());
print(f'  python+qdl / native: {p / n:.2f}   python+qdl / python null SUT: {p / z:.2f}')"
