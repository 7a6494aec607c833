"""Every CPU benchmark, how `python -m benchmarks run` starts it, and where its result goes.

A full run writes `benchmarks/results/<name>.json`; `--quick` runs a smoke version of each (few
rounds, short answers) into `benchmarks/results/quick/`, so that it never replaces a full result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    about: str
    env: tuple[tuple[str, str], ...] = ()
    #: run by `python -m benchmarks run` without names (False: it needs something else, named in `about`)
    default: bool = True

    def result(self, quick: bool, root: Path = RESULTS) -> Path:
        return (root / "quick" if quick else root) / f"{self.name}.json"

    def command(self, quick: bool, out: Path, python: str = "python") -> list[str]:
        return [python, "-m", self.module, *(self.quick if quick else self.args), "--out", str(out)]


def llmflow_variants(name: str, concurrency: str, variants: tuple[str, ...], about: str) -> Benchmark:
    """The peer comparison's closed loops, llmflow beside llmflow with other engine options
    (`--llmflow-variant`) and llama-server, nothing else."""
    common = ("--rates", "", "--prefix-concurrency", "0")
    common += ("--skip", "example-server", "--skip", "llama_cpp.server")
    chosen = tuple(a for v in variants for a in ("--llmflow-variant", v))
    return Benchmark(
        name, "benchmarks.peers.compare_servers",
        ("--rounds", "5", "--prompt-tokens", "64", "--max-tokens", "64", "--waves", "2",
         "--concurrency", concurrency, *common, *chosen),
        ("--rounds", "1", "--concurrency", "4", "--max-tokens", "16", *common, *chosen[-2:], "--quick"),
        about,
    )  # fmt: skip


SUITE: tuple[Benchmark, ...] = (
    Benchmark(
        "engine", "benchmarks.bench_engine",
        ("--runs", "9", "--max-tokens", "256"), ("--runs", "2", "--max-tokens", "32"),
        "LLM.stream against raw llama-cpp-python on one model object",
    ),
    Benchmark(
        "flash_attn", "benchmarks.bench_flash_attn",
        ("--runs", "9", "--max-tokens", "256"), ("--runs", "2", "--max-tokens", "32"),
        "flash attention on against off on the CPU, both llama.cpp engines, one stream",
    ),
    Benchmark(
        "tracing", "benchmarks.bench_tracing",
        ("--runs", "9", "--max-tokens", "256"), ("--runs", "2", "--max-tokens", "32"),
        "predict_stream with MLflow tracing on, off and timings only",
    ),
    Benchmark(
        "mlflow_load", "benchmarks.bench_mlflow_load",
        ("--runs", "7", "--processes", "5"), ("--runs", "2", "--processes", "1"),
        "mlflow.pyfunc.load_model in process and in fresh processes",
    ),
    Benchmark(
        "http", "benchmarks.bench_http",
        ("--runs", "21", "--max-tokens", "128"), ("--runs", "2", "--max-tokens", "32"),
        "one stream over HTTP against the same stream in process",
    ),
    Benchmark(
        "server_cpu", "benchmarks.server_cpu",
        ("--streams", "3", "--max-tokens", "256"), ("--streams", "1", "--max-tokens", "32"),
        "CPU per streamed event by server thread",
    ),
    Benchmark(
        "batching", "benchmarks.bench_batching",
        ("--rounds", "5", "--concurrency", "1,8"),
        ("--rounds", "1", "--concurrency", "1,8", "--max-tokens", "16", "--requests", "8", "--widths", "1,8"),
        "8 streams against 1 per weight type, beside raw llama_decode per batch width",
    ),
    Benchmark(
        "step_shapes", "benchmarks.bench_step_shapes",
        ("--rounds", "7"), ("--rounds", "2"),
        "one scheduler step: own passes per prompt chunk against one fused pass",
    ),
    Benchmark(
        "peers", "benchmarks.peers.compare_servers",
        ("--rounds", "5", "--prompt-tokens", "64", "--max-tokens", "64", "--waves", "2", "--rates", "0.5,1",
         "--rate-requests", "12"),
        ("--rounds", "1", "--concurrency", "1,4", "--rates", "1", "--rate-requests", "8",
         "--max-tokens", "16", "--requests", "8", "--prefix-concurrency", "2", "--quick"),
        "llmflow serve, llama-server, the example server and llama_cpp.server side by side",
    ),
    Benchmark(
        "peers_prefix", "benchmarks.peers.compare_servers",
        ("--rounds", "5", "--prompt-tokens", "64", "--max-tokens", "64", "--waves", "2", "--concurrency", "4",
         "--rates", "", "--prefix-concurrency", "4"),
        ("--rounds", "1", "--concurrency", "", "--rates", "", "--max-tokens", "16",
         "--prefix-concurrency", "2", "--quick"),
        "the peers' shared-prefix chat and 4 streams again, after the change that keeps cached prompts",
    ),
    llmflow_variants(
        "peers_chunk", "8,16", ("chunk64:prefill_chunk=64", "chunk128:prefill_chunk=128"),
        "llmflow with larger prompt chunks against llama-server, at 8 and 16 streams",
    ),
    llmflow_variants(
        "peers_onepass", "8,16", ("onepass:one_pass=true",),
        "llmflow with each step in one llama_decode (prompts of several sequences together) "
        "against llama-server, at 8 and 16 streams",
    ),
    llmflow_variants(
        "peers_fa", "1,2,4,8,16", ("nofa:flash_attn=false",),
        "llmflow with flash attention on the CPU (its default, as llama-server's auto) and off, "
        "against llama-server, at 1 to 16 streams",
    ),
    Benchmark(
        "sessions", "benchmarks.bench_sessions",
        ("--rounds", "3"),
        ("--rounds", "1", "--turns", "3", "--answer-tokens", "16", "--sessions", "10",
         "--short-requests", "3", "--stream-tokens", "32", "--identity-sessions", "2"),
        "multi-turn sessions, a short request alone and 8 streams against llama-server and the example "
        "server; the conversation cache's host tier (32 sessions on 8 sequences) and disk tier (a restart)",
    ),
    Benchmark(
        "cpu_steps", "benchmarks.bench_cpu_steps",
        ("--rounds", "3"), ("--rounds", "1", "--max-tokens", "16", "--quick"),
        "llama-batched-bench against the batching engine's steps at 16 streams, flash attention off and on",
    ),
    Benchmark(
        "serving_steps", "benchmarks.bench_serving_steps",
        ("--concurrency", "8,32,64", "--rounds", "5", "--variant", "switch_0.5ms=--switch-interval 0.5"),
        ("--concurrency", "8,64", "--rounds", "1", "--max-tokens", "32", "--variant",
         "switch_0.5ms=--switch-interval 0.5", "--quick"),
        "llmflow serve over a model-less engine whose steps sleep as a GPU's take: the serving's "
        "own cost at 8-64 streams, Python's GIL switch interval against 0.5 ms",
    ),
    Benchmark(
        "spark", "benchmarks.bench_spark",
        ("--prompts", "64", "--max-tokens", "64", "--rounds", "5", "--skip-oversubscribed"),
        ("--prompts", "8", "--max-tokens", "16", "--rounds", "1", "--skip-oversubscribed"),
        "in-process predict against spark_udf on local[2]",
        env=(("SPARK_LOCAL_IP", "127.0.0.1"),),
    ),
    Benchmark(
        "surface", "benchmarks.bench_surface",
        ("--rounds", "5", "--max-tokens", "64"), ("--rounds", "2", "--max-tokens", "16"),
        "embeddings against Llama.embed, logprobs on against off, n=4 against 4 requests",
    ),
    Benchmark(
        "soak", "benchmarks.soak_disconnect",
        ("--streams", "1000", "--clients", "8"), ("--streams", "30", "--clients", "4", "--warmup", "2"),
        "streams cut by their clients: nothing leaks",
    ),
    Benchmark(
        "load", "benchmarks.load_test",
        ("--clients", "32", "--duration", "120", "--max-queue", "8"),
        ("--clients", "8", "--duration", "10", "--max-queue", "4"),
        "more clients than the queue takes: refusals, no errors",
    ),
    Benchmark(
        "constraints", "benchmarks.bench_constraints",
        ("--rounds", "5", "--max-tokens", "128"), ("--rounds", "3", "--max-tokens", "64"),
        "decode tok/s with a JSON Schema constraint against unconstrained, both llama.cpp engines",
    ),
    Benchmark(
        "ray", "benchmarks.bench_ray",
        ("--rounds", "3", "--max-tokens", "64"),
        ("--rounds", "1", "--concurrency", "1,4", "--max-tokens", "16", "--requests", "4"),
        "Ray Serve with 1 and 2 replicas against llmflow serve: the proxy's cost and the replicas' gain",
    ),
    Benchmark(
        "constraint_libraries", "benchmarks.bench_constraint_libraries",
        ("--per-dataset", "10"), ("--per-dataset", "3"),
        "llguidance, xgrammar, outlines-core on a JSONSchemaBench sample (needs the constraint-compare "
        "extra and LLMFLOW_SCHEMA_CORPUS: a git directory of guidance-ai/jsonschemabench)",
        default=False,
    ),
)  # fmt: skip

BY_NAME = {b.name: b for b in SUITE}
#: benchmarks that take the peers' arguments (`--llama-server`, `--sdist`, `--example-server`)
PEER_MODULES = ("benchmarks.peers.compare_servers", "benchmarks.bench_sessions")
