#!/usr/bin/env bash
# How the QDL's throughput scales with its network threads (--qdl-threads),
# against raw TCP over as many connections, on one host.
#
# Runs from prebuilt release binaries only (loadgen-node, sut-node,
# tcp-floor): no cargo, no network. Starts --nodes synthetic sut-nodes on
# this host, then for each QDL thread count T runs loadgen-node Offline
# with --qdl-threads T and at least T connections in all, with ResNet50
# fp32 (602,112 B) and uint8 (150,528 B) samples, and raw TCP
# (tcp-floor send --streams T) to one tcp-floor serve. Prints Gbit/s and
# samples/s of payload, each as a ratio to its one-thread point, and checks
# the target: aggregate throughput at 8 threads at least 6x one thread.
#
# Every run lasts about --secs seconds (loadgen-node's are sized from a
# short run at the same point). T needs T+1 cores (the LoadGen's query
# thread besides the QDL's); larger T are skipped unless --oversubscribe.
# The nodes share the host: each has --node-threads network threads and
# runs fast batches of up to 64 samples, but the synthetic backend still
# hashes every input byte, so their CPU grows with the throughput.
#
#   tests/scaling/run.sh [--bin-dir DIR] [--threads "1 2 4 8 12"] [--nodes 4]
#                        [--node-threads 2] [--secs 3] [--oversubscribe]
set -euo pipefail
shopt -s inherit_errexit

bin_dir=target/release
threads="1 2 4 8 12"
nodes=4
node_threads=2
secs=3
oversubscribe=0

usage() { sed -n '2,22s/^# \{0,1\}//p' "$0"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --node-threads) node_threads=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --oversubscribe) oversubscribe=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

number() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?([eE][+-]?[0-9]+)?$ ]]; }
for t in $threads; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --threads: '$t' is not a thread count" >&2; exit 2; }
done
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --nodes: '$nodes' is not a count" >&2; exit 2; }
[[ "$node_threads" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --node-threads: '$node_threads' is not a count" >&2; exit 2; }
number "$secs" || { echo "run.sh: --secs: '$secs' is not a number of seconds" >&2; exit 2; }

loadgen=$bin_dir/loadgen-node
sut=$bin_dir/sut-node
floor=$bin_dir/tcp-floor
for b in "$loadgen" "$sut" "$floor"; do
  [ -x "$b" ] || { echo "run.sh: $b is missing (build: cargo build --release -p loadgen-cli -p sut-node -p tests)" >&2; exit 2; }
done

cores=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/qdl-scaling.XXXXXX")
pids=()
cleanup() {
  exec 3>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits up to 30 s for a line matching $2 in file $1; prints it.
wait_line() {
  local i
  for i in $(seq 300); do
    if grep -q "$2" "$1" 2>/dev/null; then grep -m1 "$2" "$1"; return 0; fi
    sleep 0.1
  done
  echo "run.sh: no '$2' in $1 after 30 s:" >&2
  cat "$1" >&2
  return 1
}

# The nodes.
sut_list=
for i in $(seq "$nodes"); do
  "$sut" serve --listen 127.0.0.1:0 --name "scale-$i" --backend synthetic \
    --threads "$node_threads" --max-batch-size 64 --no-quic \
    >"$work/node-$i.out" 2>"$work/node-$i.err" &
  pids+=($!)
done
for i in $(seq "$nodes"); do
  line=$(wait_line "$work/node-$i.out" " ready on ")
  addr=$(echo "$line" | sed 's/.* ready on \([^ ]*\).*/\1/')
  sut_list=${sut_list:+$sut_list,}$addr
done

# The raw TCP server: it runs until its stdin (fd 3 here) is closed.
mkfifo "$work/floor.in"
"$floor" serve --answer-bytes 4 <"$work/floor.in" >"$work/floor.out" 2>"$work/floor.err" &
pids+=($!)
exec 3>"$work/floor.in"
floor_port=$(wait_line "$work/floor.out" '^[0-9]')

# The value of a detail-log key of the run in $1.
detail() {
  sed -n "s/.*\"key\": \"$2\", \"value\": \([^,]*\),.*/\1/p" "$1/mlperf_log_detail.txt" | head -1
}

# One Offline run: $1 bytes, $2 threads, $3 samples; prints samples/s.
loadgen_run() {
  local bytes=$1 t=$2 samples=$3 out conns
  out=$work/run-$bytes-$t
  rm -rf "$out"
  conns=$(( (t + nodes - 1) / nodes ))
  if ! timeout 300 "$loadgen" --sut "$sut_list" --benchmark resnet50 \
      --scenario Offline --mode PerformanceOnly --sample-bytes "$bytes" \
      --total-sample-count 256 --performance-sample-count 256 \
      --qdl-threads "$t" --connections-per-node "$conns" \
      --set min_duration=1000 --set min_query_count=1 \
      --set "target_qps=$(awk -v n="$samples" 'BEGIN { printf "%.0f", n / 1.1 }')" \
      --no-trace --output-dir "$out" >"$out.log" 2>&1; then
    echo "run.sh: loadgen-node failed ($bytes B, $t threads):" >&2
    tail -20 "$out.log" >&2
    return 1
  fi
  local sps
  sps=$(detail "$out" result_samples_per_second)
  number "$sps" || { echo "run.sh: no result_samples_per_second in $out" >&2; return 1; }
  echo "$sps"
}

# A point: a short run (0.25 GB) sizes one of about $secs seconds.
loadgen_point() {
  local bytes=$1 t=$2 short rate
  short=$(awk -v b="$bytes" 'BEGIN { printf "%.0f", 0.25e9 / b }')
  rate=$(loadgen_run "$bytes" "$t" "$short")
  loadgen_run "$bytes" "$t" "$(awk -v r="$rate" -v s="$secs" -v m="$short" \
    'BEGIN { n = r * s; if (n < m) n = m; printf "%.0f", n }')"
}

# Raw TCP over $2 connections; prints samples/s.
raw_point() {
  timeout 300 "$floor" send --connect "127.0.0.1:$floor_port" --streams "$2" \
    --bytes "$1" --secs "$secs" \
    | sed -n 's/.*"samples_per_s":\([0-9.e+-]*\).*/\1/p'
}

gbit() { awk -v r="$1" -v b="$2" 'BEGIN { printf "%.2f", r * b * 8 / 1e9 }'; }
times() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

echo "QDL scaling: loadgen-node Offline to $nodes synthetic sut-nodes (--threads $node_threads," \
  "--max-batch-size 64) on this host ($cores cores), ${secs} s runs; raw TCP: tcp-floor"
echo "  (xT1): ratio to the same column's 1-thread point; connections: per node x nodes"
skipped=
run=()
for t in $threads; do
  if [ "$oversubscribe" = 0 ] && [ $((t + 1)) -gt "$cores" ]; then
    skipped="$skipped $t"
  else
    run+=("$t")
  fi
done
[ -n "$skipped" ] && echo "  skipped --qdl-threads$skipped: this host has $cores cores, T needs T+1 (--oversubscribe runs them anyway)"
printf '\n  %-9s %3s %11s | %10s %11s %7s | %10s %11s %7s\n' \
  bytes T connections "QDL Gbit/s" samples/s "(xT1)" "raw Gbit/s" samples/s "(xT1)"

verdict=
for bytes in 602112 150528; do
  one_qdl=0 one_raw=0
  for t in "${run[@]}"; do
    qdl=$(loadgen_point "$bytes" "$t")
    raw=$(raw_point "$bytes" "$t")
    if [ "$t" = 1 ]; then one_qdl=$qdl one_raw=$raw; fi
    conns=$(( (t + nodes - 1) / nodes ))
    printf '  %-9s %3s %11s | %10s %11.0f %7s | %10s %11.0f %7s\n' \
      "$bytes" "$t" "${conns}x$nodes" "$(gbit "$qdl" "$bytes")" "$qdl" \
      "$(times "$qdl" "$one_qdl")" "$(gbit "$raw" "$bytes")" "$raw" "$(times "$raw" "$one_raw")"
    if [ "$t" = 8 ] && [ "$one_qdl" != 0 ]; then
      x=$(awk -v a="$qdl" -v b="$one_qdl" 'BEGIN { printf "%.2f", a / b }')
      ok=$(awk -v x="$x" 'BEGIN { print (x >= 6) ? "PASS" : "FAIL" }')
      verdict="${verdict:+$verdict; }$bytes B: ${x}x $ok (raw TCP $(times "$raw" "$one_raw"))"
    fi
  done
done

exec 3>&-
echo
if [ -z "$verdict" ]; then
  echo "target: aggregate throughput at 8 threads at least 6x one thread: not measured (needs --threads with 1 and 8)"
elif [[ "$verdict" == *FAIL* ]]; then
  echo "target: aggregate throughput at 8 threads at least 6x one thread: FAIL: $verdict"
else
  echo "target: aggregate throughput at 8 threads at least 6x one thread: PASS: $verdict"
fi
