#!/usr/bin/env bash
# The Python module (mlperf_net_qdl) under the official LoadGen's Python
# bindings (PyPI mlcommons-loadgen 6.0.17): docs/examples/python_harness.py
# against two real sut-nodes (synthetic backend) on 127.0.0.1, in Offline
# (QUIC) and Server (gRPC), an LLM with first tokens, in accuracy mode, and
# with a node killed mid-run.
#
# The virtual environment (maturin, mlcommons-loadgen) lives in
# ${MLPN_CACHE:-~/.cache/mlperf-net}/python-qdl and is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

venv=${MLPN_CACHE:-$HOME/.cache/mlperf-net}/python-qdl
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import mlperf_loadgen" 2>/dev/null ||
    [ ! -x "$venv/bin/maturin" ]; then
    "$venv/bin/pip" install -q "maturin>=1.9.4,<2" "mlcommons-loadgen==6.0.17"
fi
py=$venv/bin/python
VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH maturin develop -q -m qdl/python/Cargo.toml
cargo build -q -p sut-node --bin sut-node

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
ok() { echo "python: ok: $*"; passed=$((passed + 1)); }
fail() { echo "python: FAILED: $*" >&2; failed=$((failed + 1)); }

# start_node NAME SERVICE_US [FLAG...]: starts a sut-node on free ports; sets
# $pid, $grpc (host:port), $quic (host:port) and $fp (its certificate's
# SHA-256).
start_node() {
    local name=$1 us=$2
    shift 2
    local out=$work/$name.out err=$work/$name.err
    RUST_LOG=warn target/debug/sut-node serve --listen 127.0.0.1:0 --name "$name" \
        --backend synthetic --service-time "fixed:$us" "$@" >"$out" 2>"$err" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 200); do
        grep -q " ready on " "$out" && break
        kill -0 "$pid" 2>/dev/null || { cat "$err" >&2; echo "sut-node $name did not start" >&2; exit 1; }
        sleep 0.1
    done
    grep -q " ready on " "$out" || { echo "sut-node $name is not ready" >&2; exit 1; }
    grpc=$(sed -n 's/.* ready on \([^ ]*\) .*/\1/p' "$out")
    quic=$(sed -n 's/.* quic \([^ ]*\)$/\1/p' "$out")
    fp=$(sed -n 's/.*fingerprint \([0-9a-f]*\) .*/\1/p' "$err")
}

harness() {
    "$py" docs/examples/python_harness.py --total-sample-count 512 \
        --performance-sample-count 512 "$@"
}

# check_run DIR RESULT NODE1 NODE2: the four logs, the SUT name from the
# round trip, the summary's result.
check_run() {
    local dir=$1 want=$2 f name
    for f in summary.txt detail.txt accuracy.json trace.json; do
        [ -f "$dir/mlperf_log_$f" ] || { fail "$dir: no mlperf_log_$f"; return; }
    done
    name=$(grep -o '"key": "sut_name", "value": "[^"]*"' "$dir/mlperf_log_detail.txt" | sed 's/.*"value": //')
    case $name in
        *"Network SUT (2 nodes: $3, $4)"*) ;;
        *) fail "$dir: SUT name $name"; return ;;
    esac
    grep -q "^Result is : $want\$" "$dir/mlperf_log_summary.txt" ||
        { fail "$dir: summary:"; sed -n '/^Result is/,/^Additional/p' "$dir/mlperf_log_summary.txt" >&2; return; }
    ok "$dir: four logs, SUT name $name, $want"
}

# 1 ms per sample and node: about 2,000 samples/s from the two nodes.
start_node py-a 1000
a_grpc=$grpc a_quic=$quic a_fp=$fp
start_node py-b 1000
b_grpc=$grpc b_quic=$quic b_fp=$fp

# Offline over QUIC (pinned certificates): the expected rate is above what
# the nodes do, so the run lasts its minimum duration.
if harness --sut "quic://$a_quic,quic://$b_quic" --tls-pin "$a_fp" --tls-pin "$b_fp" \
    --scenario Offline --output-dir "$work/offline" \
    --set min_duration_ms=1000 --set min_query_count=100 --set offline_expected_qps=4000; then
    check_run "$work/offline" VALID py-a py-b
else
    fail "Offline run exited $?"
fi

# Server over gRPC at a fifth of the nodes' rate, with a latency bound that
# a loaded CI machine meets (enough queries for early stopping). Not over
# QUIC: debug builds on a busy 2-core machine show p99 latencies of hundreds
# of milliseconds over QUIC, with loadgen-node as with this module.
if harness --sut "$a_grpc,$b_grpc" --scenario Server --output-dir "$work/server" \
    --set min_duration_ms=3000 \
    --set min_query_count=1000 --set server_target_qps=400 \
    --set server_target_latency_ns=100000000; then
    check_run "$work/server" VALID py-a py-b
else
    fail "Server run exited $?"
fi

# Accuracy, the data set loaded 128 samples at a time and sent zstd-compressed:
# every sample answered once, with the synthetic backend's answer to that
# sample's bytes (the harness's synthetic sample i:
# random.Random(i).randbytes(4096)).
if harness --sut "$a_grpc,$b_grpc" --scenario Offline --mode AccuracyOnly \
    --performance-sample-count 128 --input-codec zstd --output-dir "$work/accuracy"; then
    if "$py" - "$work/accuracy/mlperf_log_accuracy.json" 512 <<'EOF'; then
import json, random, sys

def synthetic_answer(data, size):
    # proto/facts/src/synthetic.rs
    m = (1 << 64) - 1
    def mix(h, w):
        h = ((h ^ w) * 0x100000001B3) & m
        return h ^ (h >> 29)
    word = lambda i: int.from_bytes(data[i:i + 8], "little")
    seed = 0xCBF29CE484222325 ^ len(data)
    lanes = [seed ^ k for k in range(4)]
    blocks = len(data) // 32 * 32
    for i in range(0, blocks, 32):
        lanes = [mix(lanes[k], word(i + 8 * k)) for k in range(4)]
    h = seed
    for lane in lanes:
        h = mix(h, lane)
    whole = blocks + (len(data) - blocks) // 8 * 8
    for i in range(blocks, whole, 8):
        h = mix(h, word(i))
    for b in data[whole:]:
        h = ((h ^ b) * 0x100000001B3) & m
    out = b""
    while len(out) < size:
        h = (h + 0x9E3779B97F4A7C15) & m
        z = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    return out[:size]

entries = json.load(open(sys.argv[1]))
total = int(sys.argv[2])
indices = sorted(e["qsl_idx"] for e in entries)
assert indices == list(range(total)), f"answered {len(indices)} samples, not each of {total} once"
for e in entries:
    want = synthetic_answer(random.Random(e["qsl_idx"]).randbytes(4096), 4)
    assert bytes.fromhex(e["data"]) == want, f"sample {e['qsl_idx']}: answer {e['data']}, not {want.hex()}"
EOF
        ok "accuracy: each of the 512 samples answered once, with its own answer"
    else
        fail "accuracy log"
    fi
else
    fail "accuracy run exited $?"
fi

# Bad options: a clear error before any run, and a non-zero exit.
expect_refusal() {
    local why=$1 out rc=0
    shift
    out=$(harness --sut "$a_grpc,$b_grpc" --output-dir "$work/refused" "$@" 2>&1) || rc=$?
    if [ "$rc" != 0 ] && grep -q "$why" <<<"$out" && [ ! -e "$work/refused/mlperf_log_detail.txt" ]; then
        ok "refused ($*): $(tail -1 <<<"$out" | cut -c1-120)"
    else
        fail "not refused as expected ($*): exit $rc: $out"
    fi
}
expect_refusal "invalid dispatch policy" --dispatch fastest
expect_refusal "allow no compression for llama2-70b" --model llama2-70b --input-codec zstd
expect_refusal "needs a way to check its" --sut "quic://$a_quic"
expect_refusal "cannot connect" --sut "127.0.0.1:1"

# An LLM in Server: first tokens (FirstTokenComplete), then 8 tokens each.
start_node py-e 2000 --llm-tokens 8
e_grpc=$grpc
start_node py-f 2000 --llm-tokens 8
f_grpc=$grpc
if harness --sut "$e_grpc,$f_grpc" --model llama2-70b --scenario Server \
    --output-dir "$work/llm" --set min_duration_ms=2000 --set min_query_count=200 \
    --set server_target_qps=100; then
    check_run "$work/llm" VALID py-e py-f
    tps=$(sed -n 's/^Completed tokens per second: //p' "$work/llm/mlperf_log_summary.txt")
    if grep -q "^TTFT Early Stopping Result:" "$work/llm/mlperf_log_summary.txt" &&
        "$py" -c "import sys; sys.exit(not float('${tps:-0}') > 0)"; then
        ok "llm: first tokens and token counts reached the LoadGen ($tps tokens/s)"
    else
        fail "llm: no token latencies in the summary"
    fi
else
    fail "LLM Server run exited $?"
fi

# A node killed mid-run: the test ends (no hang), the harness says why and
# exits non-zero. 5 ms per sample: 20,000 samples take about 50 s.
start_node py-c 5000
c_grpc=$grpc c_pid=$pid
start_node py-d 5000
d_grpc=$grpc
dead=$work/dead
mkdir -p "$dead"
timeout 120 "$py" docs/examples/python_harness.py --sut "$c_grpc,$d_grpc" \
    --scenario Offline --output-dir "$dead" --set min_query_count=20000 \
    --set offline_expected_qps=1 2>"$work/dead.err" &
harness_pid=$!
# Kill once the LoadGen has generated its queries (it logs that, then issues).
for _ in $(seq 1 300); do
    grep -q '"generated_query_count"' "$dead/mlperf_log_detail.txt" 2>/dev/null && break
    sleep 0.1
done
kill -9 "$c_pid"
wait "$c_pid" 2>/dev/null || true
rc=0
wait "$harness_pid" || rc=$?
if [ "$rc" = 124 ]; then
    fail "the run with a dead node hung (killed after 120 s)"
elif [ "$rc" = 0 ]; then
    fail "the run with a dead node exited 0"
elif ! grep -q "network SUT failed: .*py-c" "$work/dead.err" ||
    grep -q "network SUT failed: Name() failed" "$work/dead.err"; then
    fail "the run with a dead node exited $rc without naming it: $(tail -3 "$work/dead.err")"
else
    ok "dead node: exit $rc, $(grep -o 'network SUT failed: .*' "$work/dead.err" | cut -c1-160)"
fi

echo "python: $passed passed, $failed failed"
[ "$failed" = 0 ]
