#!/usr/bin/env bash
# llama.cpp with CUDA for one GPU machine, from the llama.cpp source that the pinned
# llama-cpp-python sdist vendors: llama-cpp-python itself and llama.cpp's own tools
# (llama-server, llama-batched-bench, llama-bench, llama-quantize) come out of ONE CMake build,
# so the engine and its peer run the same ggml with the same flags. The tools build llama.cpp's
# multimodal library (libmtmd) for llama-server's --mmproj; the build leaves it in the Python
# package's lib/ too, where `llama_cpp.mtmd_cpp` loads it (llmflow's engine option `mmproj`).
#
#   build_llama_cpp.sh strip SDIST_DIR DEST    # here: a copy without what this build never reads
#   build_llama_cpp.sh build SRC PREFIX        # there: PREFIX/site (Python package), PREFIX/bin
#
# strip keeps the CPU, CUDA, BLAS and RPC ggml backends and drops docs, model files, examples,
# tests and the vendored tree's stray .git file (about 30 MB left of about 220 MB).
# CUDA_ARCHITECTURES (default 90, the H100/H200) and JOBS (default: every core) tune build.
set -euo pipefail

CMAKE_FLAGS=(
    -DGGML_CUDA=ON
    "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}"
    -DLLAMA_CURL=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    # not built by llama-cpp-python on its own: the peers and tools measured beside it
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON
    # the tools build libmtmd themselves: llama-cpp-python must not add it a second time
    # (install_mtmd puts the tools' copy where the package looks for it)
    -DLLAVA_BUILD=OFF
)
# llama-server reads images itself (--mmproj): no other multimodal tool is needed
TOOLS=(llama-server llama-batched-bench llama-bench llama-quantize)

strip_source() {
    local sdist=$1 dest=$2
    rm -rf "$dest"
    mkdir -p "$dest"
    cp -a "$sdist"/. "$dest"/
    rm -rf "$dest"/{.git,.github,docs,examples,tests,docker}
    local cpp=$dest/vendor/llama.cpp
    rm -rf "$cpp"/{.git,.github,docs,models,examples,tests,benches,media,pocs}
    # the multimodal library's sample image, sound and video
    rm -f "$cpp"/tools/mtmd/test-*.{jpeg,mp3,mp4}
    # the web UI's sources (its CMake file and templates stay): the server then embeds no UI
    find "$cpp/tools/ui" -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name '*.in' -exec rm -rf {} +
    for backend in "$cpp"/ggml/src/ggml-*/; do
        case $(basename "$backend") in
            ggml-cpu | ggml-cuda | ggml-blas | ggml-rpc) ;;
            *) rm -rf "$backend" ;;
        esac
    done
    du -sh "$dest"
}

build() {
    # absolute: pip's build-dir setting is read relative to the source tree, not to here
    local src prefix
    src=$(realpath "$1")
    prefix=$(realpath -m "$2")
    mkdir -p "$prefix/bin"
    local started=$SECONDS
    CMAKE_ARGS="${CMAKE_FLAGS[*]}" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" \
        python3 -m pip install --no-deps --no-build-isolation --no-cache-dir --upgrade \
        --target "$prefix/site" --config-settings=build-dir="$prefix/build" "$src"
    for tool in "${TOOLS[@]}"; do
        local found
        found=$(find "$prefix/build" -type f -name "$tool" -perm -u+x | head -n 1)
        [[ -n $found ]] || { echo "no $tool in the build" >&2; exit 1; }
        ln -sf "$found" "$prefix/bin/$tool"
    done
    install_mtmd "$prefix"
    echo "built llama-cpp-python, libmtmd and ${TOOLS[*]} in $((SECONDS - started)) s"
}

install_mtmd() {
    # libmtmd.so and its versioned names (links kept as links) beside libllama.so: its libllama
    # and libggml are found by their sonames among those the package has already loaded
    local prefix=$1 lib=$1/site/llama_cpp/lib
    local files
    mapfile -t files < <(find "$prefix/build" -name 'libmtmd.so*' \( -type f -o -type l \))
    ((${#files[@]})) || { echo "no libmtmd in the build" >&2; exit 1; }
    cp -P "${files[@]}" "$lib"/
    # loaded as `llama_cpp.mtmd_cpp` loads it, after the package's own libraries (the package
    # itself imports what the wheels bring, which come later)
    LD_PRELOAD=$("${CXX:-g++}" -print-file-name=libstdc++.so.6) python3 -c '
import ctypes, sys
for name in ("libggml-base.so", "libggml.so", "libllama.so", "libmtmd.so"):
    ctypes.CDLL(f"{sys.argv[1]}/{name}")
' "$lib" || { echo "libmtmd.so does not load beside libllama.so" >&2; exit 1; }
}

case ${1:-} in
    strip) strip_source "$2" "$3" ;;
    build) build "$2" "$3" ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
