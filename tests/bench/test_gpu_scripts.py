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
    ],
)
def test_gpu_script_starts(script):
    done = subprocess.run(
        [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_server_variants_run_as_servers_of_their_own():
    """`--llama-server-variant LABEL=FLAGS` adds llama-server once more, with those flags, on a
    port of its own, and `--llmflow-variant LABEL=ARGS` llmflow serve with more arguments; the
    plain commands are unchanged by them."""
    import argparse

    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from bench_llama_cpp_gpu import server_commands

    args = argparse.Namespace(
        bin=Path("bin"), concurrency=[1, 8], n_ctx=256, engine_option=["flash_attn=true"],
        llama_server_variant=["backend-sampling=-bs"], llmflow_variant=["si=--switch-interval 0.5"],
    )  # fmt: skip
    ports = {"llmflow": 1, "llmflow si": 4, "llama-server": 2, "llama-server backend-sampling": 3}
    commands = server_commands(args, Path("m.gguf"), ports)
    assert list(commands) == list(ports)
    plain, variant = commands["llama-server"], commands["llama-server backend-sampling"]
    assert variant == [*plain[: plain.index("--port") + 1], "3", *plain[plain.index("--port") + 2 :], "-bs"]
    assert plain[plain.index("--parallel") :][:2] == ["--parallel", "8"]
    llmflow = commands["llmflow"]
    assert llmflow[llmflow.index("--port") + 1] == "1" and "flash_attn=true" in llmflow
    assert commands["llmflow si"] == [
        *llmflow[: llmflow.index("--port") + 1], "4", *llmflow[llmflow.index("--port") + 2 :],
        "--switch-interval", "0.5",
    ]  # fmt: skip
