"""The GPU benchmark scripts run only on a lent GPU machine, so nothing else would notice if a
refactor here broke their imports: each must at least start and print its usage on this machine."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "script",
    [
        "benchmarks/gpu/bench_llama_cpp_gpu.py",
        "benchmarks/gpu/make_gguf.py",
        "benchmarks/bench_transformers_gpu.py",
    ],
)
def test_gpu_script_starts(script):
    done = subprocess.run(
        [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
