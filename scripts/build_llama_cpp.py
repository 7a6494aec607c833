#!/usr/bin/env python3
"""Build llama-cpp-python once for this CPU, without llama.cpp's AMX code, and install it.

Why not pip's default build: it compiles llama.cpp with `-march=native`, which on Intel Xeons with
AMX (Sapphire Rapids and later) turns on llama.cpp's AMX matrix path, and that path crashes at the
first decode of quantized models (llama.cpp issue 20824). So the build names its instruction sets
itself (`GGML_NATIVE=OFF`): every SIMD extension this CPU has that ggml can use (AVX2, AVX512,
VNNI, BF16, ...), AMX off. The CPU repack of Q4_0/Q8_0 weights (`GGML_CPU_REPACK`) stays on.

The wheel is kept in a cache keyed by the version and the flags, so `make demo` and `make test`,
and later clones on the same machine, build it once. Extra CMake flags (a GPU backend, say) can be
added through the CMAKE_ARGS environment variable; they come last and so win.

Standard library only: it runs before the project's virtual environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import heartbeat  # beside this file

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "llama-cpp-python"
#: /proc/cpuinfo flag -> the ggml CMake option that compiles code for it
GGML_FEATURES = {
    "sse4_2": "GGML_SSE42",
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "bmi2": "GGML_BMI2",
    "avx_vnni": "GGML_AVX_VNNI",
    "avx512f": "GGML_AVX512",
    "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
    "avx512_bf16": "GGML_AVX512_BF16",
}
#: ggml's GGML_AVX512 compiles for all of these at once
AVX512_BASE = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}
AMX_OFF = ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
#: llama.cpp's multimodal library (`mtmd`): LLAVA_BUILD=ON makes the wheel carry libmtmd.so beside
#: libllama.so, which `llama_cpp.mtmd_cpp` loads (the engine option `mmproj` needs it)
COMMON = ["-DLLAVA_BUILD=ON"]


def pinned_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    match = re.search(rf'"{PACKAGE}==([^"]+)"', pyproject.read_text())
    if match is None:
        raise SystemExit(f"{pyproject} pins no {PACKAGE} version")
    return match.group(1)


def cpu_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_args(flags: set[str] | None) -> list[str]:
    """The CMake flags for a CPU with these /proc/cpuinfo flags; None: not x86-64 Linux, where
    llama.cpp's own defaults are kept (no AMX exists there)."""
    if flags is None:
        return list(COMMON)
    args = [*COMMON, "-DGGML_NATIVE=OFF"]
    for flag, option in GGML_FEATURES.items():
        present = flag in flags and (flags >= AVX512_BASE or not option.startswith("GGML_AVX512"))
        args.append(f"-D{option}={'ON' if present else 'OFF'}")
    return args + AMX_OFF


def this_cpu_flags() -> set[str] | None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    return cpu_flags(Path("/proc/cpuinfo").read_text())


def cache_dir(version: str, args: list[str]) -> Path:
    root = Path(os.environ.get("LLMFLOW_WHEEL_CACHE") or Path.home() / ".cache" / "llmflow" / "wheels")
    key = hashlib.sha256(" ".join([version, platform.python_version(), *args]).encode()).hexdigest()[:12]
    return root / f"{PACKAGE}-{version}-{key}"


def build_wheel(version: str, args: list[str], python: str, target: Path) -> Path:
    enabled = [
        a.split("=")[0].removeprefix("-DGGML_") for a in args if a.startswith("-DGGML_") and a.endswith("=ON")
    ]
    print(
        f"==> Building llama.cpp {version} from source for this CPU ({', '.join(enabled) or 'defaults'}; "
        "AMX off). It takes about 5 minutes on 2 cores and happens once per machine.",
        flush=True,
    )
    env = {**os.environ, "CMAKE_ARGS": " ".join(args)}
    with tempfile.TemporaryDirectory() as scratch:
        command = [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v"]
        command += ["--no-binary", PACKAGE, f"{PACKAGE}=={version}", "-w", scratch]
        _run_showing_progress(command, env)
        built = next(Path(scratch).glob("*.whl"))
        target.mkdir(parents=True, exist_ok=True)
        shutil.move(str(built), target / built.name)
    return target / built.name


def _run_showing_progress(command: list[str], env: dict[str, str]) -> None:
    """Run pip, print the compiler's step count as it goes and the tail of the log if it fails."""
    step = re.compile(r"^\s*\[(\d+)/(\d+)\]")
    tail: deque[str] = deque(maxlen=60)
    started = time.monotonic()
    shown = {"percent": -5}
    pending = bytearray()

    def on_output(data: bytes) -> None:
        pending.extend(data)
        *lines, rest = pending.split(b"\n")
        pending[:] = rest
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip()
            tail.append(line)
            match = step.match(line)
            if match:
                done, total = int(match.group(1)), int(match.group(2))
                percent = 100 * done // total
                if percent >= shown["percent"] + 5 or done == total:
                    shown["percent"] = percent
                    elapsed = time.monotonic() - started
                    print(f"    compiled {done}/{total} files ({elapsed:.0f} s)", flush=True)
            elif line.startswith(("Collecting", "Downloading", "Building wheel", "Created wheel")):
                print("    " + line.strip(), flush=True)

    code = heartbeat.watch(command, "building llama.cpp", on_output, env=env)
    if code != 0:
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"building {PACKAGE} failed (exit {code}); its last lines are above")


def install(python: str, wheel: Path, venv_marker: Path, key: str) -> None:
    if venv_marker.exists() and venv_marker.read_text().strip() == key:
        print(f"==> llama.cpp for this CPU is installed already ({wheel.name})", flush=True)
        return
    print(f"==> Installing llama.cpp for this CPU ({wheel.name}) and what it needs", flush=True)
    for command in (
        [python, "-m", "pip", "install", "--force-reinstall", "--no-deps", str(wheel)],
        [python, "-m", "pip", "install", str(wheel)],  # its own requirements, from the registry
    ):
        if heartbeat.watch(command, "installing llama.cpp", heartbeat.pass_through) != 0:
            raise SystemExit(f"installing {wheel} failed; pip's message is above")
    venv_marker.write_text(key + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to install into")
    parser.add_argument("--print-args", action="store_true", help="print the CMake flags and exit")
    options = parser.parse_args()

    args = cmake_args(this_cpu_flags()) + os.environ.get("CMAKE_ARGS", "").split()
    if options.print_args:
        print(" ".join(args))
        return
    version = pinned_version()
    target = cache_dir(version, args)
    wheels = sorted(target.glob("*.whl"))
    if wheels:
        wheel = wheels[-1]
        print(f"==> Reusing llama.cpp {version} built earlier for this CPU ({target})", flush=True)
    else:
        wheel = build_wheel(version, args, options.python, target)
    prefix = subprocess.run(
        [options.python, "-c", "import sys; print(sys.prefix)"], check=True, capture_output=True, text=True
    ).stdout.strip()
    install(options.python, wheel, Path(prefix) / ".llama-cpp-build", target.name)


if __name__ == "__main__":
    main()
