# Sets up a real KServe v2 server for tests/tests/backend_kserve.rs: MLServer
# with its scikit-learn runtime, serving a logistic regression trained on
# scikit-learn's bundled digits data. Meant to be sourced; idempotent
# (everything is cached under $MLPN_CACHE/kserve).
#
# Exports: MLPN_KSERVE_MLSERVER (the venv's `mlserver` command)
#          MLPN_KSERVE_PYTHON   (the venv's python, for the accuracy script)
#          MLPN_KSERVE_MODELS   (the directory to give `mlserver start`; its
#                                model is named "digits")
#          MLPN_KSERVE_DATA     (held-out digits: samples/NNNN.npy inputs,
#                                float64 [64], and labels.npy)

_mlpn_kserve_setup() {
    local cache="${MLPN_CACHE:-$HOME/.cache/mlperf-net}/kserve"
    local venv="$cache/venv"
    local here
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    mkdir -p "$cache" || return 1
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" || return 1
    fi
    if ! "$venv/bin/python" -c 'import mlserver, mlserver_sklearn, sklearn, joblib' 2>/dev/null; then
        "$venv/bin/pip" install --quiet --upgrade pip || return 1
        "$venv/bin/pip" install --quiet mlserver==1.7.1 mlserver-sklearn==1.7.1 scikit-learn joblib numpy || return 1
    fi
    if ! grep -q '"inputs"' "$cache/models/digits/model-settings.json" 2>/dev/null ||
        [ ! -f "$cache/data/labels.npy" ]; then
        "$venv/bin/python" "$here/train_digits.py" "$cache/models/digits" "$cache/data" || return 1
    fi
    export MLPN_KSERVE_MLSERVER="$venv/bin/mlserver"
    export MLPN_KSERVE_PYTHON="$venv/bin/python"
    export MLPN_KSERVE_MODELS="$cache/models"
    export MLPN_KSERVE_DATA="$cache/data"
}
_mlpn_kserve_setup
