"""`llmflow serve` (the batched llama.cpp engine on CUDA) against llama.cpp's own `llama-server`,
measured with `llmflow bench` over HTTP, with `llama-batched-bench` as the ceiling: one run, one
GPU, the same GGUF files and the same llama.cpp build.

For every GGUF (e.g. Q4_K_M and f16 of one model): `llama-batched-bench` first (the aggregate
decode speed llama.cpp reaches with no server and no sampling, with and without a unified KV
cache), then the servers side by side: llmflow serve, llama-server, and llama-server again with
each `--llama-server-variant`'s flags (`backend-sampling=-bs`: its sampling on the GPU). At each
concurrency level they are benchmarked one after the other, in an order that alternates, for
several rounds. A row is a server's median round by output throughput, so every number in it
comes from one real run; every round's summary is kept. Every server gets `parallel` sequences of
`n_ctx` tokens each and greedy requests of `prompt_tokens` random words and `max_tokens` tokens;
output tokens are counted the same way for all (re-tokenized). Last, the engine in this process
at `parallel` streams, each step timed in three parts: the forward pass (GPU, waited for), the
samplers (llama.cpp on the CPU) and the rest (the scheduler's Python).

`--gap` splits the distance to `llama-batched-bench` at the highest concurrency, on the first
model: llmflow serve (HTTP) and the engine in this process on workloads that remove one cause at a
time (`GAP_WORKLOADS`: short prompts, long answers, both), each against `llama-batched-bench` with
the same prompt and answer lengths, and engine variants (`GAP_CONFIGS`: the samplers as they were,
one KV pool). `--reference-transformers HF_DIR` adds llmflow serve with the transformers engine
on a Hugging Face directory of the same shape, on the gap's first workload.

    python benchmarks/gpu/bench_llama_cpp_gpu.py --bin BUILD/bin \
        --model Q4_K_M=models/llama3-8b-Q4_K_M.gguf --model f16=models/llama3-8b-f16.gguf \
        --tokenizer models/smollm2-135m-f16.gguf --out benchmarks/results/llama_cpp_gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_process import free_port, started  # noqa: E402

from llmflow.bench import BenchOptions, run_bench  # noqa: E402
from llmflow.bench.driver import parse_list  # noqa: E402


class Run:
    """The arguments, the results so far and the clock; results are written after every part,
    so a run cut short keeps what it measured."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.started = time.perf_counter()
        self.doc: dict[str, Any] = {
            "command": " ".join(["benchmarks/gpu/bench_llama_cpp_gpu.py", *_portable(sys.argv[1:])]),
            "commit": args.commit,
            "machine": machine(),
            "config": {
                k: v
                for k, v in vars(args).items()
                if k not in ("model", "bin", "out", "tokenizer", "commit", "reference_transformers")
            },
            "models": {},
        }

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over_budget(self) -> bool:
        return self.elapsed() > self.args.budget_s

    def save(self) -> None:
        self.doc["elapsed_s"] = round(self.elapsed(), 1)
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(self.doc, indent=1) + "\n")

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    import llama_cpp

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
        "gpu": gpu,
        "llama_cpp_python": llama_cpp.__version__,
    }


# -- llama-batched-bench ---------------------------------------------------------------------


def batched_bench(
    args: argparse.Namespace,
    model: Path,
    unified: bool,
    levels: list[int] | None = None,
    npp: int | None = None,
    ntg: int | None = None,
) -> dict[str, Any]:
    """`llama-batched-bench` at `levels` sequences (default: every concurrency) of `npp` prompt and
    `ntg` generated tokens (default: the servers' workload)."""
    npl = ",".join(str(c) for c in levels or args.concurrency)
    npp = args.prompt_tokens if npp is None else npp
    ntg = args.max_tokens if ntg is None else ntg
    command = [
        str(args.bin / "llama-batched-bench"), "-m", str(model), "-ngl", "99", "-fa", "on",
        "-c", str(max(args.concurrency) * args.n_ctx), "-b", "2048", "-ub", "512",
        "-npp", str(npp), "-ntg", str(ntg), "-npl", npl,
        "--output-format", "jsonl", *(["-kvu"] if unified else []),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        return {"command": _portable(command), "error": done.stderr[-2000:]}
    return {
        "command": _portable(command),
        "rows": rows,
        "decode_tok_s": {str(r["pl"]): r["speed_tg"] for r in rows},
        # the generated tokens over prefill and decode together (no overlap: all prompts first)
        "generated_tok_s": {str(r["pl"]): r["pl"] * r["tg"] / (r["t_pp"] + r["t_tg"]) for r in rows},
    }


# -- the two servers -------------------------------------------------------------------------


def server_commands(args: argparse.Namespace, model: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    """llmflow serve, llama-server, and llama-server again with each `--llama-server-variant`'s
    flags (e.g. its backend sampling), by server name."""
    commands = {
        name: llmflow_command(args, model, ports[name], extra_args=extra)
        for name, extra in llmflow_serve_args(args).items()
    }
    for name, flags in llama_server_flags(args).items():
        commands[name] = [
            str(args.bin / "llama-server"), "-m", str(model),
            "--host", "127.0.0.1", "--port", str(ports[name]),
            "-ngl", "99", "-fa", "on", "-c", str(max(args.concurrency) * args.n_ctx),
            "--parallel", str(max(args.concurrency)), "-b", "2048", "-ub", "512", "--no-webui", *flags,
        ]  # fmt: skip
    return commands


def llmflow_command(
    args: argparse.Namespace,
    model: Path,
    port: int,
    extra_options: list[str] | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    options = [
        f"parallel={max(args.concurrency)}",
        f"n_ctx={args.n_ctx}",
        *args.engine_option,
        *(extra_options or []),
    ]
    return [
        sys.executable, "-m", "llmflow", "serve", str(model), "--engine", "llama_cpp_batched",
        "--host", "127.0.0.1", "--port", str(port), "--max-queue", "4096", "--log-level", "warning",
        *[part for option in options for part in ("--engine-option", option)], *(extra_args or []),
    ]  # fmt: skip


def llmflow_serve_args(args: argparse.Namespace) -> dict[str, list[str]]:
    """llmflow serve's runs by name: as it comes, then each variant (`LABEL=ARGS`, more
    `llmflow serve` arguments)."""
    return {"llmflow": [], **_variants("llmflow", args.llmflow_variant)}


def llama_server_flags(args: argparse.Namespace) -> dict[str, list[str]]:
    """llama-server's runs by name: as it comes, then each variant (`LABEL=FLAGS`)."""
    return {"llama-server": [], **_variants("llama-server", args.llama_server_variant)}


def _variants(server: str, specs: list[str]) -> dict[str, list[str]]:
    runs = {}
    for spec in specs:
        label, _, flags = spec.partition("=")
        runs[f"{server} {label}"] = flags.split()
    return runs


def bench_level(
    args: argparse.Namespace,
    url: str,
    concurrency: int,
    prompt_tokens: int | None = None,
    max_tokens: int | None = None,
    usage: bool = False,
) -> dict[str, Any]:
    """One level of `llmflow bench`. Output tokens re-tokenized (the table: every server counted
    the same way), or with `usage` as the server reports them (the gap: the tokens generated, as
    the engine in process and llama-batched-bench count them)."""
    document = run_bench(
        BenchOptions(
            url=url,
            concurrency=(concurrency,),
            requests=max(args.min_requests, args.waves * concurrency),
            prompt_tokens=args.prompt_tokens if prompt_tokens is None else prompt_tokens,
            max_tokens=args.max_tokens if max_tokens is None else max_tokens,
            seed=args.seed,
            tokenizer=str(args.tokenizer),
            request_usage=usage,
        )
    )
    if document["aborted"]:
        raise SystemExit(f"{url}: {document['aborted']}")
    return document


def serve_and_bench(run: Run, label: str, model: Path) -> dict[str, Any]:
    args = run.args
    names = [*llmflow_serve_args(args), *llama_server_flags(args)]
    ports = {name: free_port() for name in names}
    commands = server_commands(args, model, ports)
    jobs = [
        (name, concurrency, {"concurrency": concurrency})
        for i, concurrency in enumerate(args.concurrency)
        for name in (names if i % 2 == 0 else names[::-1])
    ]
    documents = alternated(run, label, commands, ports, jobs)
    return {
        "commands": {name: _portable(command) for name, command in commands.items()},
        "servers": {name: _server_rows(documents[name]) for name in names},
    }


def alternated(
    run: Run,
    label: str,
    commands: dict[str, list[str]],
    ports: dict[str, int],
    jobs: list[tuple[str, Any, dict[str, Any]]],
) -> dict[str, dict[Any, list[dict[str, Any]]]]:
    """Start every server, then run the `jobs` (server name, key, `bench_level` keywords) for up to
    `--rounds` rounds, in reverse order every other round; each server's documents by key."""
    args = run.args
    documents: dict[str, dict[Any, list[dict[str, Any]]]] = {name: {} for name in commands}
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        urls = {
            name: stack.enter_context(started(name, command, ports[name], logs, timeout_s=300))
            for name, command in commands.items()
        }
        run.log(f"{label}: {len(urls)} servers up")
        for r in range(args.rounds):
            if r > 0 and run.over_budget():
                run.log(f"{label}: time budget spent after {r} rounds")
                break
            for name, key, options in jobs if r % 2 == 0 else jobs[::-1]:
                document = bench_level(args, urls[name], **options)
                documents[name].setdefault(key, []).append(document)
                s = document["levels"][0]["summary"]
                run.log(f"{label} round {r + 1} {name} {key}: {s['output_throughput']:.0f} tok/s")
    return documents


def median_round(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose output throughput is the median (the lower middle one of an even count), so
    every number of a row comes from one real run."""
    ordered = sorted(documents, key=lambda d: d["levels"][0]["summary"]["output_throughput"] or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def _server_rows(by_level: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    rows = {}
    for concurrency, documents in by_level.items():
        if not documents:
            continue
        median = median_round(documents)
        summary = median["levels"][0]["summary"]
        throughputs = [d["levels"][0]["summary"]["output_throughput"] for d in documents]
        rows[str(concurrency)] = {
            "output_tok_s": summary["output_throughput"],
            "output_tok_s_rounds": throughputs,
            "output_tok_s_min_max": [min(throughputs), max(throughputs)],
            "ttft_p50_s": summary["ttft_s"]["median"],
            "ttft_p99_s": summary["ttft_s"]["p99"],
            "itl_p50_s": summary["itl_s"]["median"],
            "itl_p99_s": summary["itl_s"]["p99"],
            "summary_of_median_round": summary,
            "summaries_of_rounds": [d["levels"][0]["summary"] for d in documents],
            "requests_of_median_round": [_sample(r) for r in median["levels"][0]["requests"]],
        }
    return rows


def _sample(record: dict[str, Any]) -> dict[str, Any]:
    """A request's raw numbers, without its per-token arrays (they would make the file huge)."""
    return {k: v for k, v in record.items() if not isinstance(v, list)}


# -- the engine in this process: where a step's time goes ------------------------------------


def step_split(run: Run, label: str, model: Path) -> dict[str, Any]:
    """`parallel` concurrent generations on the engine, every step timed: forward pass (GPU),
    samplers and the rest (Python: planning, filling the batch, handing out tokens)."""
    workload = f"{run.args.prompt_tokens}/{run.args.max_tokens}"
    return engine_runs(run, label, model, [], [workload])[workload]


def engine_runs(
    run: Run,
    label: str,
    model: Path,
    extra_options: list[str],
    workloads: list[str],
    keep: list[dict[str, float]] | None = None,
) -> dict[str, dict[str, Any]]:
    """`step_split` for each workload ("PROMPT/ANSWER" tokens) on one engine: a warm-up wave
    (before the first workload only), then a measured wave of `parallel` generations. Besides the
    full decode steps' split, the wave's wall time is cut by what each step carried: full decode
    steps, steps with prompt tokens (prefill), decode steps of fewer sequences (ramp-up and tail),
    and the time outside steps."""
    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedEngine
    from llmflow.params import SamplingParams
    from llmflow.types import CancelToken

    args = run.args
    parallel = max(args.concurrency)
    options: dict[str, Any] = {"parallel": parallel, "n_ctx": args.n_ctx}
    options.update(_parse_options([*args.engine_option, *extra_options]))
    engine = LlamaCppBatchedEngine.load(model, **options)
    steps: list[dict[str, float]] = []
    time_steps(engine, steps)
    rng = random.Random(args.seed)
    vocab = engine._vocab.n_vocab
    results: dict[str, dict[str, Any]] = {}
    counts: list[int] = []
    try:
        for workload in workloads:
            prompt_tokens, max_tokens = GAP_WORKLOADS.get(workload) or map(int, workload.split("/"))
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens)

            def one(prompt: list[int], params: SamplingParams = params) -> int:
                return sum(1 for _ in engine.generate(prompt, params, CancelToken()))

            for attempt in ("warm-up", "measured") if workload == workloads[0] else ("measured",):
                steps.clear()
                counts.clear()
                prompts = [
                    [rng.randrange(300, vocab - 300) for _ in range(prompt_tokens)] for _ in range(parallel)
                ]
                threads = [threading.Thread(target=lambda p=p: counts.append(one(p))) for p in prompts]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                run.log(f"{label} {workload} in process ({attempt}): {len(steps)} steps in {wall:.2f} s")
            results[workload] = _split_of(steps, counts, wall, parallel, options)
            if keep is not None:  # the measured wave's steps
                keep.extend(steps)
            run.log(f"{label} {workload} in process: {results[workload]['generated_tok_s']:.0f} tok/s")
    finally:
        engine.close()
    return results


def time_steps(engine: Any, steps: list[dict[str, float]]) -> None:
    """Append a record of every step of `engine` (the batched llama.cpp engine) to `steps`: its
    start, its wall time, the batch's tokens, and the time in `fill` (writing the batch), `compute`
    (the forward pass, waited for) and `sample` (wall and this thread's CPU: a gap between the two
    is time spent waiting for the GIL)."""
    backend, scheduler = engine._backend, engine._scheduler
    current: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a)
            finally:
                current[name] = current.get(name, 0.0) + time.perf_counter() - t0
                current[name + "_cpu"] = current.get(name + "_cpu", 0.0) + time.thread_time() - c0

        return wrapper

    backend.fill = timed("fill_s", backend.fill)
    backend.compute = timed("gpu_s", backend.compute)
    inner_sample = timed("sample_s", backend.sample)

    def sample(samples: Any) -> Any:
        current["sampled"] = current.get("sampled", 0) + len(samples)
        return inner_sample(samples)

    backend.sample = sample
    inner_step = scheduler._step

    def step() -> None:
        current.clear()
        t0 = time.perf_counter()
        inner_step()
        total = time.perf_counter() - t0
        steps.append({"start": t0, "step_s": total, "tokens": backend._batch.n_tokens, **current})

    scheduler._step = step


def _full_decode_steps(steps: list[dict[str, float]], parallel: int) -> list[dict[str, float]]:
    """The steps that decoded a token for every sequence and nothing else."""
    return [s for s in steps if s["tokens"] == parallel and s.get("sampled") == parallel and "gpu_s" in s]


def _split_of(
    steps: list[dict[str, float]], counts: list[int], wall: float, parallel: int, options: dict[str, Any]
) -> dict[str, Any]:
    full = _full_decode_steps(steps, parallel)
    prefill = [s for s in steps if s["tokens"] > s.get("sampled", 0)]
    partial = [s for s in steps if s["tokens"] == s.get("sampled", 0) < parallel]
    result: dict[str, Any] = {
        "engine_options": options,
        "steps": len(steps),
        "wall_s": wall,
        "generated_tokens": sum(counts),
        "generated_tok_s": sum(counts) / wall,
        "full_decode_steps": len(full),
        "wall_by_step_kind_s": {
            "full_decode": sum(s["step_s"] for s in full),
            "with_prompt_tokens": sum(s["step_s"] for s in prefill),
            "partial_decode": sum(s["step_s"] for s in partial),
            "outside_steps": wall - sum(s["step_s"] for s in steps),
        },
        "steps_by_kind": {
            "full_decode": len(full),
            "with_prompt_tokens": len(prefill),
            "partial_decode": len(partial),
        },
    }
    if full:
        for key in ("step_s", "gpu_s", "sample_s", "fill_s"):
            result[f"{key}_median"] = statistics.median(s.get(key, 0.0) for s in full)
        python = [s["step_s"] - s["gpu_s"] - s.get("sample_s", 0.0) for s in full]
        result["python_s_median"] = statistics.median(python)
        result["python_s_p90"] = sorted(python)[int(0.9 * (len(python) - 1))]
        result["raw_full_steps"] = full
    return result


# -- the distance to llama-batched-bench, one cause at a time (--gap) ------------------------

#: name -> (prompt tokens, answer tokens): the first is the table's own workload; short prompts
#: take the prefill out, long answers make the ramp-up and the tail a smaller share of the run
GAP_WORKLOADS: dict[str, tuple[int, int]] = {
    "128/128": (128, 128),
    "8/128": (8, 128),
    "128/512": (128, 512),
    "8/512": (8, 512),
}
#: name -> (engine options, sampling, workloads: None for every one). "rowwise" samples as the
#: engine did before `argmax_rows` (an argmax call per sequence); "threads" splits the one argmax
#: over 4 threads (in this process only)
GAP_CONFIGS: dict[str, tuple[list[str], str | None, tuple[str, ...] | None]] = {
    "default": ([], None, None),
    "rowwise_sampling": ([], "rowwise", ("128/128", "8/512")),
    "kv_unified": (["kv_unified=true"], None, ("128/128", "8/512")),
}
IN_PROCESS_ONLY: dict[str, tuple[list[str], str | None, tuple[str, ...] | None]] = {
    "threaded_argmax": ([], "threads", ("128/128",)),
}


def _config_workloads(config: tuple[list[str], str | None, tuple[str, ...] | None]) -> list[str]:
    return list(config[2] or GAP_WORKLOADS)


def rowwise_sample(self: Any, samples: Any) -> list[int]:
    """`LlamaStepBackend.sample` as it was before `argmax_rows` (greedy rows only: the benchmark's
    requests), an argmax call per sequence on a view of its row."""
    import numpy as np

    lib, ctx, n_vocab = self._lib, self._ctx, self._n_vocab
    tokens = []
    for sampler, index, _top, _allowed in samples:
        if sampler == "greedy":
            row = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, index), shape=(n_vocab,))
            tokens.append(int(row.argmax()))
        else:
            tokens.append(lib.llama_sampler_sample(sampler, ctx, index))
    return tokens


def _threaded_argmax(pool: Any, parts: int) -> Any:
    import numpy as np

    def argmax_rows(rows: Any) -> Any:
        if len(rows) < 2 * parts:
            return rows.argmax(axis=1)
        chunks = np.array_split(np.arange(len(rows)), parts)
        done = list(pool.map(lambda c: rows[c[0] : c[-1] + 1].argmax(axis=1), chunks))
        return np.concatenate(done)

    return argmax_rows


@contextlib.contextmanager
def sampling_as(kind: str | None) -> Iterator[None]:
    """The engine's sampling replaced for the block: "rowwise" (as before `argmax_rows`) or
    "threads" (the one argmax over 4 threads); None leaves it."""
    from llmflow.engines import llama_cpp_batched as module

    if kind is None:
        yield
        return
    saved_sample, saved_argmax = module.LlamaStepBackend.sample, module.argmax_rows
    pool = None
    if kind == "rowwise":
        module.LlamaStepBackend.sample = rowwise_sample  # type: ignore[method-assign]
    elif kind == "threads":
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(4)
        module.argmax_rows = _threaded_argmax(pool, 4)
    else:
        raise ValueError(kind)
    try:
        yield
    finally:
        module.LlamaStepBackend.sample, module.argmax_rows = saved_sample, saved_argmax  # type: ignore[method-assign]
        if pool is not None:
            pool.shutdown()


def serve_with_sampling(kind: str, argv: list[str]) -> None:
    """`llmflow ARGV...` with the engine's sampling replaced (a server of the gap's variants)."""
    from llmflow.cli import app

    sys.argv = ["llmflow", *argv]
    with sampling_as(kind):
        app()


def logits_holding_gil() -> None:
    """The engine's `llama_get_logits` called without letting go of the GIL (ctypes' PYFUNCTYPE
    on the same symbol): it only returns a pointer once the pass is waited for, and a call that
    lets go of the GIL lets the event loop take it, for up to a switch interval."""
    import ctypes

    from llmflow.engines.llama_cpp_batched import LlamaStepBackend

    def rows(self: Any, n: int) -> Any:
        import numpy as np

        if n == 0:
            return np.empty((0, self._n_vocab), dtype=np.float32)
        get = self.__dict__.get("_get_logits_gil")
        if get is None:
            f = self._lib.llama_get_logits
            get = self._get_logits_gil = ctypes.PYFUNCTYPE(f.restype, *f.argtypes)(
                ctypes.cast(f, ctypes.c_void_p).value
            )
        return np.ctypeslib.as_array(get(self._ctx), shape=(n, self._n_vocab))

    LlamaStepBackend._rows = rows  # type: ignore[method-assign]


def serve_timing_steps(steps_out: str, patch: str, argv: list[str]) -> None:
    """`llmflow ARGV...` whose engine times its steps as `engine_runs` does (written to STEPS_OUT
    as JSON when the server exits); PATCH "logits_gil" applies `logits_holding_gil`. uvicorn
    raises the SIGTERM it stopped on again once it has shut down: the handler it then finds is
    this one, which writes the steps."""
    import signal

    from llmflow.cli import app
    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedEngine

    if patch == "logits_gil":
        logits_holding_gil()
    steps: list[dict[str, float]] = []
    load = LlamaCppBatchedEngine.load.__func__  # type: ignore[attr-defined]

    def timed_load(cls: Any, model_path: Any, **options: Any) -> Any:
        engine = load(cls, model_path, **options)
        time_steps(engine, steps)
        return engine

    LlamaCppBatchedEngine.load = classmethod(timed_load)  # type: ignore[method-assign]

    def write_and_exit(*_: Any) -> None:
        Path(steps_out).write_text(json.dumps(steps))
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, write_and_exit)
    sys.argv = ["llmflow", *argv]
    app()


#: name -> (more llmflow serve arguments, patch of the server's engine)
SERVED_VARIANTS: dict[str, tuple[list[str], str]] = {
    "default": ([], "none"),
    "switch_0.5ms": (["--switch-interval", "0.5"], "none"),
    "logits_gil": ([], "logits_gil"),
    "logits_gil_switch_0.5ms": (["--switch-interval", "0.5"], "logits_gil"),
}


def served_steps(run: Run, label: str, model: Path) -> dict[str, Any]:
    """The engine's steps timed inside `llmflow serve` at full concurrency (the full-width decode
    steps' split, as in process), beside the same engine in process: where a served step's extra
    time goes. Server variants: the GIL switch interval, `llama_get_logits` holding the GIL."""
    args = run.args
    level = max(args.concurrency)
    workloads = ["8/512", "128/128"]
    out: dict[str, Any] = {"concurrency": level, "workloads": workloads, "in_process": {}, "servers": {}}
    run.doc["models"][label]["served_steps"] = out
    with tempfile.TemporaryDirectory() as folder:
        ports = {name: free_port() for name in SERVED_VARIANTS}
        files = {name: Path(folder) / f"{name}.json" for name in SERVED_VARIANTS}
        commands = {}
        for name, (extra, patch) in SERVED_VARIANTS.items():
            command = llmflow_command(args, model, ports[name], extra_args=extra)
            commands[name] = [sys.executable, str(Path(__file__).resolve()), "--serve-timing-steps",
                              str(files[name]), patch, *command[3:]]  # fmt: skip
        jobs = [
            (name, workload, {"concurrency": level, "prompt_tokens": p, "max_tokens": m, "usage": True})
            for workload in workloads
            for name in SERVED_VARIANTS
            for p, m in [GAP_WORKLOADS[workload]]
        ]
        documents = alternated(run, f"{label} served steps", commands, ports, jobs)
        for name in SERVED_VARIANTS:
            steps = json.loads(files[name].read_text()) if files[name].exists() else []
            out["servers"][name] = {
                "command": _portable(commands[name]),
                "rows": {w: _server_rows({level: docs})[str(level)] for w, docs in documents[name].items()},
                "full_steps": _full_step_split(steps, level),
            }
    run.save()
    for workload in workloads:
        steps_in: list[dict[str, float]] = []
        result = engine_runs(run, f"{label} served steps", model, [], [workload], steps_in)
        out["in_process"][workload] = {**result[workload], "full_steps": _full_step_split(steps_in, level)}
        run.save()
    return out


def _full_step_split(steps: list[dict[str, float]], parallel: int) -> dict[str, Any] | None:
    """Medians over the full-width decode steps: each part's wall time, the sampling's CPU time,
    and the period from one step's start to the next (the time between steps included)."""
    full = _full_decode_steps(steps, parallel)
    if not full:
        return None
    period = {a["start"]: b["start"] - a["start"] for a, b in itertools.pairwise(steps)}
    med = statistics.median
    rest = [s["step_s"] - s["gpu_s"] - s.get("sample_s", 0.0) - s.get("fill_s", 0.0) for s in full]
    return {
        "steps": len(full),
        "step_ms": med(s["step_s"] for s in full) * 1e3,
        "period_ms": med(period[s["start"]] for s in full if s["start"] in period) * 1e3,
        "fill_ms": med(s.get("fill_s", 0.0) for s in full) * 1e3,
        "gpu_ms": med(s["gpu_s"] for s in full) * 1e3,
        "sample_ms": med(s.get("sample_s", 0.0) for s in full) * 1e3,
        "sample_cpu_ms": med(s.get("sample_s_cpu", 0.0) for s in full) * 1e3,
        "rest_ms": med(rest) * 1e3,
    }


def gap(run: Run, label: str, model: Path) -> dict[str, Any]:
    """The gap's measurements for one model; written into the results as they come."""
    args = run.args
    level = max(args.concurrency)
    out: dict[str, Any] = {
        "concurrency": level,
        "workloads": {name: {"prompt_tokens": p, "max_tokens": m} for name, (p, m) in GAP_WORKLOADS.items()},
        "configs": {
            name: {"engine_options": c[0], "sampling": c[1], "workloads": _config_workloads(c)}
            for name, c in {**GAP_CONFIGS, **IN_PROCESS_ONLY}.items()
        },
        "batched_bench": {},
        "servers": {},
        "in_process": {},
    }
    run.doc["models"][label]["gap"] = out
    unified_workloads = set(_config_workloads(GAP_CONFIGS["kv_unified"]))
    for name, (prompt, answer) in GAP_WORKLOADS.items():
        kinds = ("streams", "unified") if name in unified_workloads else ("streams",)
        out["batched_bench"][name] = {
            kind: batched_bench(
                args, model, unified=kind == "unified", levels=[level], npp=prompt, ntg=answer
            )
            for kind in kinds
        }
        run.log(f"{label} gap batched-bench {name}: {_brief(out['batched_bench'][name])}")
        run.save()
    if "servers" not in args.skip:
        out["servers"] = gap_servers(run, label, model, level)
        run.save()
    if "split" not in args.skip:
        for name, config in {**GAP_CONFIGS, **IN_PROCESS_ONLY}.items():
            options, sampling, _ = config
            with sampling_as(sampling):
                out["in_process"][name] = engine_runs(
                    run, f"{label} {name}", model, options, _config_workloads(config)
                )
            run.save()
    return out


def gap_servers(run: Run, label: str, model: Path, level: int) -> dict[str, Any]:
    args = run.args
    ports = {name: free_port() for name in GAP_CONFIGS}
    commands = {}
    for name, (options, sampling, _) in GAP_CONFIGS.items():
        command = llmflow_command(args, model, ports[name], options)
        if sampling is not None:  # `python -m llmflow ...` -> this script, which patches, then llmflow
            command = [sys.executable, str(Path(__file__).resolve()), "--serve-with-sampling", sampling,
                       *command[3:]]  # fmt: skip
        commands[name] = command
    jobs = [
        (name, workload, {"concurrency": level, "prompt_tokens": prompt, "max_tokens": answer, "usage": True})
        for name, config in GAP_CONFIGS.items()
        for workload in _config_workloads(config)
        for prompt, answer in [GAP_WORKLOADS[workload]]
    ]
    documents = alternated(run, f"{label} gap", commands, ports, jobs)
    return {
        "commands": {name: _portable(command) for name, command in commands.items()},
        "rows": {
            name: {w: _server_rows({level: docs})[str(level)] for w, docs in by_workload.items()}
            for name, by_workload in documents.items()
        },
    }


def reference_transformers(run: Run, hf_dir: Path) -> dict[str, Any]:
    """llmflow serve with the transformers engine (continuous batching, greedy) on the gap's first
    workload, at 1 stream and at the highest concurrency."""
    args = run.args
    level = max(args.concurrency)
    prompt, answer = next(iter(GAP_WORKLOADS.values()))
    port = free_port()
    options = ["continuous_batching=true", "batch_sampling=false", f"max_concurrency={level}",
               f"n_ctx={args.n_ctx}"]  # fmt: skip
    command = [
        sys.executable, "-m", "llmflow", "serve", str(hf_dir), "--engine", "transformers",
        "--host", "127.0.0.1", "--port", str(port), "--max-queue", "4096", "--log-level", "warning",
        *[part for option in options for part in ("--engine-option", option)],
    ]  # fmt: skip
    out: dict[str, Any] = {"command": _portable(command), "workload": [prompt, answer], "rows": {}}
    documents: dict[int, list[dict[str, Any]]] = {1: [], level: []}
    try:
        with ExitStack() as stack:
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            try:
                url = stack.enter_context(started("transformers", command, port, logs, timeout_s=400))
            except SystemExit as exc:
                out["error"] = str(exc)[-3000:]
                return out
            run.log("transformers server up")
            for r in range(args.rounds):
                if r > 0 and run.over_budget():
                    break
                for concurrency in documents:
                    document = bench_level(
                        args, url, concurrency, prompt_tokens=prompt, max_tokens=answer, usage=True
                    )
                    documents[concurrency].append(document)
                    s = document["levels"][0]["summary"]
                    run.log(f"transformers round {r + 1} c={concurrency}: {s['output_throughput']:.0f} tok/s")
                    out["rows"] = _server_rows(documents)
                    run.save()
    except SystemExit as exc:  # a level that aborted
        out["error"] = str(exc)[-3000:]
    return out


def _parse_options(pairs: list[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            parsed[key] = json.loads(value)
        except ValueError:
            parsed[key] = value
    return parsed


def _portable(command: list[str]) -> list[str]:
    """The command without this machine's paths: file names only (`LABEL=path` keeps its label)."""
    return [_file_name(part) for part in command]


def _file_name(part: str) -> str:
    label, sep, path = part.partition("=")
    if sep and "/" not in label:
        return f"{label}={_file_name(path)}"
    return Path(part).name if "/" in part else part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bin", type=Path, required=True, help="folder with llama-server, llama-batched-bench"
    )
    parser.add_argument("--model", action="append", required=True, help="LABEL=PATH of a GGUF file")
    parser.add_argument("--tokenizer", type=Path, required=True, help="a GGUF with the same vocabulary")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--waves", type=int, default=2, help="requests per level = waves x concurrency")
    parser.add_argument("--min-requests", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n-ctx", type=int, default=1024, help="tokens per sequence, every server")
    parser.add_argument("--engine-option", action="append", default=[], help="KEY=VALUE for llmflow's engine")
    parser.add_argument(
        "--llama-server-variant", action="append", default=[],
        help="LABEL=FLAGS: llama-server once more with these flags (e.g. backend-sampling=-bs)",
    )  # fmt: skip
    parser.add_argument(
        "--llmflow-variant", action="append", default=[],
        help="LABEL=ARGS: llmflow serve once more with these arguments (e.g. si=--switch-interval 0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--skip", action="append", default=[], choices=["batched_bench", "servers", "split", "table"],
        help="a part of the table (table: all of them); --gap runs whatever this says",
    )  # fmt: skip
    parser.add_argument("--gap", action="store_true", help="split the distance to llama-batched-bench")
    parser.add_argument(
        "--served-steps", action="store_true",
        help="the engine's steps timed inside llmflow serve against in process (first model, top level)",
    )  # fmt: skip
    parser.add_argument(
        "--reference-transformers", type=Path, help="a Hugging Face directory of the same shape"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=480, help="no new round after this")
    parser.add_argument("--commit", default="unknown", help="the llmflow commit measured")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/llama_cpp_gpu.json"))
    args = parser.parse_args()
    args.concurrency = parse_list(args.concurrency, int, "concurrency")
    if "table" in args.skip:
        args.skip = ["batched_bench", "servers", "split"]
        args.table = False
    else:
        args.table = True
    run = Run(args)
    models = dict(pair.split("=", 1) for pair in args.model)
    for label, path in models.items():
        model = Path(path)
        entry: dict[str, Any] = run.doc["models"].setdefault(label, {"file": model.name})
        if args.served_steps and label == next(iter(models)):
            served_steps(run, label, model)
            run.save()
        if args.gap and label == next(iter(models)):
            with _skipping(args, [] if not args.table else args.skip):
                gap(run, label, model)
            run.save()
        if "batched_bench" not in args.skip:
            entry["batched_bench"] = {
                "streams": batched_bench(args, model, unified=False),
                "unified": batched_bench(args, model, unified=True),
            }
            run.log(f"{label} batched-bench: {_brief(entry['batched_bench'])}")
            run.save()
        if "servers" not in args.skip:
            entry.update(serve_and_bench(run, label, model))
            run.save()
        if "split" not in args.skip:
            entry["step_split"] = step_split(run, label, model)
            run.save()
    if args.reference_transformers:
        run.doc["reference_transformers"] = reference_transformers(run, args.reference_transformers)
        run.save()
    print(json.dumps(_table(run.doc), indent=1))


@contextlib.contextmanager
def _skipping(args: argparse.Namespace, skip: list[str]) -> Iterator[None]:
    saved, args.skip = args.skip, skip
    try:
        yield
    finally:
        args.skip = saved


def _brief(bench: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {v.get('decode_tok_s', v.get('error', '?'))}" for k, v in bench.items())


def _table(doc: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers and the target ratios (llmflow against each llama-server run)."""
    out: dict[str, Any] = {}
    for label, entry in doc["models"].items():
        servers = dict(entry.get("servers", {}))
        llmflow = servers.pop("llmflow", {})
        ceiling = entry.get("batched_bench", {})
        rows = {}
        for level, row in llmflow.items():
            best = max((b.get("decode_tok_s", {}).get(level, 0.0) for b in ceiling.values()), default=0.0)
            rows[level] = {"llmflow": round(row["output_tok_s"], 1)}
            for name, peer in servers.items():
                other = peer.get(level)
                rows[level][name] = round(other["output_tok_s"], 1) if other else None
                rows[level][f"ratio_to_{name}"] = (
                    round(row["output_tok_s"] / other["output_tok_s"], 3) if other else None
                )
            rows[level]["batched_bench"] = round(best, 1)
            rows[level]["ratio_to_batched_bench"] = round(row["output_tok_s"] / best, 3) if best else None
        split = entry.get("step_split", {})
        out[label] = {
            "rows": rows,
            "step_ms": {k: round(v * 1e3, 3) for k, v in split.items() if k.endswith(("_median", "_p90"))},
        }
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-with-sampling"]:
        serve_with_sampling(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["--serve-timing-steps"]:
        serve_timing_steps(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
