"""Every CPU benchmark, how `python -m benchmarks run` starts it, and where its result goes.

A full run writes `benchmarks/results/<name>.json`; `--quick` runs a smoke version of each (few
rounds, short answers) into `benchmarks/results/quick/`, so that it never replaces a full result.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def parser(doc: str, out: str | None = None, **numbers: int) -> argparse.ArgumentParser:
    """A benchmark script's command line: its docstring's first paragraph as the description, an
    integer option for each of `numbers` (`max_tokens=128`: `--max-tokens`, 128 by default), and
    `--out`: required where `out` is None, else its default ("": none, the result is only printed)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name, default in numbers.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    p.add_argument("--out", type=Path, default=Path(out) if out else None, required=out is None)
    return p


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    about: str


SUITE: tuple[Benchmark, ...] = (
    Benchmark("engine", "benchmarks.bench_engine",
        ("--runs", "9", "--max-tokens", "256"), ("--runs", "2", "--max-tokens", "32"),
        "LLM.stream against raw llama-cpp-python on one model object"),
    Benchmark("tracing", "benchmarks.bench_tracing",
        ("--runs", "9", "--max-tokens", "256"), ("--runs", "2", "--max-tokens", "32"),
        "predict_stream with MLflow tracing on, off and timings only"),
    Benchmark("mlflow_load", "benchmarks.bench_mlflow_load",
        ("--runs", "7", "--processes", "5"), ("--runs", "2", "--processes", "1"),
        "mlflow.pyfunc.load_model in process and in fresh processes"),
    Benchmark("http", "benchmarks.bench_http",
        ("--runs", "21", "--max-tokens", "128"), ("--runs", "2", "--max-tokens", "32"),
        "one stream over HTTP against the same stream in process"),
    Benchmark("batching", "benchmarks.bench_batching",
        ("--rounds", "5", "--concurrency", "1,8"),
        ("--rounds", "1", "--concurrency", "1,8", "--max-tokens", "16", "--requests", "8"),
        "8 streams against 1 per weight type"),
    Benchmark("peers", "benchmarks.peers.compare_servers",
        ("--rounds", "5", "--prompt-tokens", "64", "--max-tokens", "64", "--waves", "2", "--rates", "0.5,1",
         "--rate-requests", "12"),
        ("--rounds", "1", "--concurrency", "1,4", "--rates", "1", "--rate-requests", "8",
         "--max-tokens", "16", "--requests", "8", "--prefix-concurrency", "2", "--quick"),
        "llmflow serve, llama-server, the example server and llama_cpp.server side by side"),
    Benchmark("sessions", "benchmarks.bench_sessions",
        ("--rounds", "5", "--turns", "8"),
        ("--rounds", "1", "--turns", "3", "--answer-tokens", "16", "--sessions", "10",
         "--short-requests", "3", "--stream-tokens", "32", "--identity-sessions", "2"),
        "multi-turn sessions, a short request alone and 8 streams against llama-server and the example "
        "server; the conversation cache's host tier (32 sessions on 8 sequences) and disk tier (a restart)"),
    Benchmark("soak", "benchmarks.soak_disconnect",
        ("--streams", "1000", "--clients", "8"), ("--streams", "30", "--clients", "4", "--warmup", "2"),
        "streams cut by their clients: nothing leaks"),
    Benchmark("load", "benchmarks.load_test",
        ("--clients", "32", "--duration", "120", "--max-queue", "8"),
        ("--clients", "8", "--duration", "10", "--max-queue", "4"),
        "more clients than the queue takes: refusals, no errors"),
    Benchmark("constraints", "benchmarks.bench_constraints",
        ("--rounds", "5", "--max-tokens", "128"), ("--rounds", "3", "--max-tokens", "64"),
        "decode tok/s with a JSON Schema constraint against unconstrained, both llama.cpp engines"),
    Benchmark("speculation", "benchmarks.bench_speculation",
        ("--rounds", "3", "--max-tokens", "256"), ("--rounds", "3", "--max-tokens", "64"),
        "decode tok/s with prompt-lookup speculation on and off: rewrites, chat, 8 batched streams"),
    Benchmark("lora", "benchmarks.bench_lora",
        ("--rounds", "5", "--streams", "4", "--max-tokens", "64"),
        ("--rounds", "3", "--streams", "2", "--max-tokens", "16"),
        "output tok/s of batched requests with no adapter, one adapter, two adapters alternating"),
    Benchmark("images", "benchmarks.bench_images",
        ("--rounds", "3"), ("--rounds", "1", "--requests", "1"),
        "TTFT with a new image, the same image again and text alone, against llama-server --mmproj"),
)  # fmt: skip

BY_NAME = {b.name: b for b in SUITE}
#: benchmarks that take the peers' arguments (`--llama-server`, `--sdist`, `--example-server`)
PEER_MODULES = ("benchmarks.peers.compare_servers", "benchmarks.bench_sessions", "benchmarks.bench_images")
