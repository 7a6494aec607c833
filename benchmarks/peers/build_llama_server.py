"""Build llama.cpp's `llama-server` and `llama-batched-bench` once, from the pinned llama-cpp-python sdist.

The peer then runs the very llama.cpp that llmflow links against, with the same instruction sets
(`scripts/build_llama_cpp.py`'s flags). The build is cached outside the repository (default
`~/.cache/llmflow-peers`) while its stamp matches; without `--sdist` the sdist is `pip download`ed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("LLMFLOW_PEERS_CACHE", Path.home() / ".cache" / "llmflow-peers"))
# A server build with no network at build or run time: no prebuilt web UI download, no HTTPS client.
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
]  # fmt: skip
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_llama_cpp.py"


def pinned_version(pyproject: Path = PYPROJECT) -> str:
    """The llama-cpp-python version llmflow pins, so the peer and llmflow share one llama.cpp."""
    match = re.search(r'"llama-cpp-python==([^"]+)"', pyproject.read_text())
    if match is None:
        raise SystemExit(f"no pinned llama-cpp-python in {pyproject}")
    return match.group(1)


def download_sdist(version: str, cache: Path) -> Path:
    """`pip download` the source distribution (the registry's ordinary client) into the cache."""
    sdist = cache / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", str(sdist.parent)], check=True)  # fmt: skip
    if not sdist.is_file():
        raise SystemExit(f"pip download gave no {sdist.name} in {sdist.parent}")
    return sdist


def llama_cpp_source(sdist: Path, cache: Path) -> Path:
    """Unpack the sdist once; its `vendor/llama.cpp` is the source to build."""
    source = cache / "src" / sdist.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not source.is_dir():
        with tarfile.open(sdist) as archive:
            archive.extractall(cache / "src", filter="data")
    if not source.is_dir():
        raise SystemExit(f"{sdist} holds no vendor/llama.cpp")
    return source


def extra_cmake_options() -> list[str]:
    """The instruction-set flags `scripts/build_llama_cpp.py` gives llmflow's llama-cpp-python
    (AMX off, so that the peer neither crashes on AMX Xeons nor computes with other kernels),
    then `CMAKE_ARGS`, which both builds read last."""
    if str(BUILD_SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(BUILD_SCRIPT.parent))  # the script and its sibling `heartbeat`
    build_llama_cpp = importlib.import_module(BUILD_SCRIPT.stem)
    flags = [a for a in build_llama_cpp.cmake_args(build_llama_cpp.this_cpu_flags()) if "GGML_" in a]
    return [*flags, *shlex.split(os.environ.get("CMAKE_ARGS", ""))]


#: what is built: the server, and llama.cpp's own batched decode benchmark (the CPU ceiling)
TARGETS = ("llama-server", "llama-batched-bench")


def build(source: Path, build_dir: Path, jobs: int, options: list[str]) -> Path:
    """Configure with `options` and build the `TARGETS` only (Ninja when present)."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *generator, *options], check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", *TARGETS, "-j", str(jobs)], check=True)
    binary = build_dir / "bin" / "llama-server"
    if not binary.is_file():
        raise SystemExit(f"build finished without {binary}")
    return binary


def ensure_llama_server(sdist: Path | None, cache: Path = DEFAULT_CACHE, jobs: int | None = None) -> Path:
    """Return the cached `llama-server`, building it first if the cache has none for this sdist."""
    sdist = sdist or download_sdist(pinned_version(), cache)
    build_dir = cache / "build" / sdist.name.removesuffix(".tar.gz")
    binary = build_dir / "bin" / "llama-server"
    stamp = build_dir / "llmflow-stamp.json"
    cmake = [*CMAKE_OPTIONS, *extra_cmake_options()]
    wanted = {"sdist": sdist.name, "size": sdist.stat().st_size, "cmake": cmake, "targets": list(TARGETS)}
    if binary.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return binary
    binary = build(llama_cpp_source(sdist, cache), build_dir, jobs or os.cpu_count() or 1, cmake)
    stamp.write_text(json.dumps(wanted))
    return binary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python sdist (default: pip download the pin)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--jobs", type=int, help="parallel compile jobs (default: every core)")
    args = parser.parse_args()
    print(ensure_llama_server(args.sdist, args.cache_dir, args.jobs))


if __name__ == "__main__":
    main()
