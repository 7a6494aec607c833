"""Continuous batching on llama.cpp: aggregate decode tokens/s and inter-token latency (ITL) at
1, 2, 4, 8 and 16 concurrent streams, against generating one stream at a time.

In process (always): threads call `LLM.stream` on the batched engine (`llama_cpp_batched`) and on
the one-at-a-time engine (`llama_cpp`), same GGUF, same threads, same context size. With `--http`,
the same sweep over HTTP (`llmflow bench`'s client) against `llmflow serve` with each engine and
against `python -m llama_cpp.server` (the `compare` extra), one server at a time.

The same run measures the batched-compute ceiling: llama.cpp's prompt processing of a long prompt
(one forward pass over `--ceiling-tokens` tokens) in tokens/s, the most a wider batch could give.

Each level is a closed loop (llmflow bench's): `c` streams always in flight, each request a fresh
synthetic chat message of `--prompt-tokens` tokens asking for up to `--max-tokens` tokens at
temperature 0. ITL is the gap between text chunks (one token each for these English answers).
Engines run in alternating order over `--rounds` rounds; a run's row is its median round by
throughput.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_batching.py --threads 2
    PYTHONPATH=. .venv/bin/python benchmarks/bench_batching.py --threads 2 --http --no-in-process

Writes `batching.json`, `batching.md` and `batching.png` under `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from llmflow import LLM
from llmflow.bench import BenchOptions, markdown_table, run_bench
from llmflow.bench.driver import ITL_NOTE, parse_list, requests_for
from llmflow.bench.inprocess import InProcessBackend
from llmflow.bench.report import Settings, Target, build_document
from llmflow.bench.sweep import Level, Plan, Sweep, run_sweep
from llmflow.bench.tokens import TokenCounter
from llmflow.bench.workload import synthetic_requests
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path

ENGINES = {"batched": "llama_cpp_batched", "one at a time": "llama_cpp"}
#: the issue's targets, for 8 streams against 1 (batched engine)
TARGETS = {"throughput_x": 2.0, "ceiling_share": 0.75, "itl_p50_x": 4.0}


def main() -> None:
    args = parse_args()
    model = (args.model or default_model_path()).resolve()
    levels = parse_list(args.concurrency, int, "concurrency")
    parallel = args.parallel or max(levels)
    started = dt.datetime.now(dt.timezone.utc)

    ceiling = in_own_thread(prompt_processing_rate, model, args)
    print(f"batched-compute ceiling: {ceiling:.1f} prompt tokens/s", file=sys.stderr)
    decode = in_own_thread(decode_rates, model, args, sorted({1, *levels}))
    print(f"raw llama_decode, one token per sequence: {decode}", file=sys.stderr)
    rounds: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        names = list(ENGINES) if r % 2 == 0 else list(ENGINES)[::-1]
        for name in names if args.in_process else ():
            print(f"round {r + 1}/{args.rounds} · in process · {name}", file=sys.stderr)
            rounds.setdefault(f"in process, {name}", []).append(
                in_process(name, model, levels, parallel, args)
            )
        if args.http:
            for name, command in http_servers(model, parallel, args).items():
                print(f"round {r + 1}/{args.rounds} · HTTP · {name}", file=sys.stderr)
                rounds.setdefault(f"HTTP, {name}", []).append(over_http(name, command, model, levels, args))
    runs = [(label, median_round(docs)) for label, docs in rounds.items()]
    write_results(runs, rounds, ceiling, decode, args, model, parallel, started)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--requests", type=int, default=None, help="per level; default: 4 per stream, >= 8")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n-ctx", type=int, default=1024, help="each stream's context window")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="batched sequences; default: the top level, so all are batched",
    )
    parser.add_argument("--prefill-chunk", type=int, default=None, help="batched engine option")
    parser.add_argument("--ceiling-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--http", action="store_true", help="also benchmark the HTTP servers")
    parser.add_argument(
        "--no-in-process", dest="in_process", action="store_false", help="only the HTTP servers (with --http)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    return parser.parse_args()


def engine_options(name: str, parallel: int, args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"n_threads": args.threads, "n_ctx": args.n_ctx}
    if ENGINES[name] == "llama_cpp_batched":
        options["parallel"] = parallel
        if args.prefill_chunk:
            options["prefill_chunk"] = args.prefill_chunk
    return options


def in_own_thread(function, *args):
    """`function(*args)` in a thread that then ends. llama.cpp built with OpenMP keeps a team of
    threads for every thread that ever computed, until that thread ends; with more of them than
    cores, libgomp stops spinning and every later step of every engine pays thread wake-ups."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as executor:
        return executor.submit(function, *args).result()


def prompt_processing_rate(model: Path, args: argparse.Namespace, runs: int = 3) -> float:
    """llama.cpp's prompt-processing tokens/s: one `llama_decode` over a long prompt (a fresh
    one each run, after a warm-up), median of `runs`."""
    from llama_cpp import Llama

    n = args.ceiling_tokens
    llama = Llama(
        model_path=str(model),
        n_ctx=n + 16,
        n_batch=n,
        n_ubatch=n,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    try:
        rates = []
        for run in range(runs + 1):
            specs = synthetic_requests(
                1, prompt_tokens=4 * n, max_tokens=1, seed=args.seed, key=f"pp{run}", counter=None
            )
            ids = llama.tokenize(specs[0].as_prompt().encode())[:n]
            llama.reset()
            start = time.perf_counter()
            llama.eval(ids)
            if run:  # the first one warms up
                rates.append(len(ids) / (time.perf_counter() - start))
        return statistics.median(rates)
    finally:
        llama.close()


def decode_rates(
    model: Path, args: argparse.Namespace, widths: list[int], steps: int = 48
) -> dict[int, float]:
    """What llama.cpp itself gives for `w` streams: tokens/s of one `llama_decode` of one token
    for each of `w` sequences (each `--prompt-tokens` deep), without any scheduling, sampling
    or streaming around it. The batched engine at `w` streams can at best match it."""
    import llama_cpp

    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedOptions, LlamaStepBackend, _load_model
    from llmflow.engines.scheduler import BatchEntry
    from llmflow.params import SamplingParams

    width = max(widths)
    options = LlamaCppBatchedOptions.parse(
        {"n_threads": args.threads, "n_ctx": args.n_ctx, "parallel": width, "n_batch": max(512, width)}
    )
    backend = LlamaStepBackend.create(llama_cpp, _load_model(llama_cpp, model, options), options)
    greedy = backend.new_sampler(SamplingParams.parse({"temperature": 0.0}))
    try:
        depth = args.prompt_tokens
        prompt = [(100 + i * 37) % 40000 + 100 for i in range(depth)]
        for seq in range(width):
            backend.decode([BatchEntry(seq, prompt, 0, True, greedy)])
        rates = {}
        for w in [1, *widths]:  # the first round warms up
            start = time.perf_counter()
            for step in range(steps):
                backend.decode([BatchEntry(q, [200 + step], depth + step, True, greedy) for q in range(w)])
            rates[w] = w * steps / (time.perf_counter() - start)
            for q in range(w):
                backend.truncate(q, depth)
        return rates
    finally:
        backend.free_sampler(greedy)
        backend.close()


def in_process(
    name: str, model: Path, levels: tuple[int, ...], parallel: int, args: argparse.Namespace
) -> dict:
    """One sweep over every level with `LLM.stream` in threads: llmflow bench's closed loop and
    statistics, on an LLM loaded with the engine under test."""
    started = dt.datetime.now(dt.timezone.utc)
    llm = LLM.load(model, engine=ENGINES[name], engine_options=engine_options(name, parallel, args))
    counter = TokenCounter.from_llm(llm)
    backend = InProcessBackend(llm, api="chat", max_workers=max(levels), owns_llm=True)
    plan_levels = []
    for concurrency in levels:
        level = Level(concurrency=concurrency)
        count = requests_for(level, args.requests)
        specs = synthetic_requests(
            count,
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
            seed=args.seed,
            key=level.key,
            counter=counter,
        )
        plan_levels.append((level, specs))
    warmup = synthetic_requests(
        1, prompt_tokens=args.prompt_tokens, max_tokens=16, seed=args.seed, key="warmup", counter=counter
    )
    sweep = Sweep()

    async def run() -> None:
        try:
            await run_sweep(backend, Plan(plan_levels, warmup[0], args.seed), sweep, counter=counter)
        finally:
            await backend.aclose()

    asyncio.run(run())
    settings = Settings(
        requests=[len(specs) for _, specs in plan_levels],
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        dataset=None,
        temperature=0.0,
        seed=args.seed,
        tokenizer=llm.model_name,
        request_usage=True,
        warmup=True,
        timeout_s=None,
    )
    target = Target("in_process", None, "chat", f"{model.name} ({ENGINES[name]})")
    return build_document(sweep, target, settings, [ITL_NOTE], started)


def http_servers(model: Path, parallel: int, args: argparse.Namespace) -> dict[str, list[str]]:
    def llmflow_serve(name: str) -> list[str]:
        options = [f"{k}={v}" for k, v in engine_options(name, parallel, args).items()]
        return [
            sys.executable, "-m", "llmflow", "serve", str(model), "--host", "127.0.0.1",
            "--engine", ENGINES[name], *(a for o in options for a in ("--engine-option", o)),
            "--max-queue", "1024", "--log-level", "warning",
        ]  # fmt: skip

    return {
        "llmflow serve, batched": llmflow_serve("batched"),
        "llmflow serve, one at a time": llmflow_serve("one at a time"),
        "llama_cpp.server": [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
            "--n_ctx", str(args.n_ctx), "--interrupt_requests", "False", "--verbose", "False",
        ],
    }  # fmt: skip


def over_http(name: str, command: list[str], model: Path, levels: tuple[int, ...], args) -> dict:
    """Start the server, sweep every level with llmflow bench, stop it. Output tokens are counted
    with the model's tokenizer for every server (llama_cpp.server sends no usage)."""
    from compare import free_port_pair  # benchmarks/, next to this script
    from serve_process import started

    port = free_port_pair()
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(
            started(name.replace(" ", "_"), [*command, "--port", str(port)], port, logs)
        )
        options = BenchOptions(
            url=url,
            concurrency=levels,
            requests=args.requests,
            api="chat",
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
            seed=args.seed,
            tokenizer=str(model),
            request_usage=False,
        )
        document = run_bench(options)
    if document["aborted"]:
        raise SystemExit(f"{name}: {document['aborted']}")
    return document


def median_round(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose total output throughput over all levels is the median."""

    def total(doc: dict[str, Any]) -> float:
        return sum(level["summary"]["output_throughput"] or 0.0 for level in doc["levels"])

    return sorted(documents, key=total)[(len(documents) - 1) // 2]


def level_summary(document: dict[str, Any], concurrency: int) -> dict[str, Any] | None:
    for level in document["levels"]:
        if level["concurrency"] == concurrency:
            return level["summary"]
    return None


def target_check(
    document: dict[str, Any], ceiling: float, decode: dict[int, float]
) -> dict[str, float | None]:
    """The issue's ratios for 8 streams against 1, and the decode rate of 8 streams between
    tokens (1 / ITL p50 per stream) against raw `llama_decode` of 8 sequences."""
    one, eight = level_summary(document, 1), level_summary(document, 8)
    if not one or not eight or not one["output_throughput"] or not eight["output_throughput"]:
        return {}
    itl_one, itl_eight = one["itl_s"], eight["itl_s"]
    return {
        "throughput_x": eight["output_throughput"] / one["output_throughput"],
        "ceiling_share": eight["output_throughput"] / ceiling,
        "itl_p50_x": itl_eight["median"] / itl_one["median"] if itl_one and itl_eight else None,
        "decode_share": 8 / itl_eight["median"] / decode[8] if itl_eight and 8 in decode else None,
    }


def write_results(
    runs, rounds, ceiling: float, decode: dict[int, float], args, model: Path, parallel: int, started
) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    checks = {label: target_check(doc, ceiling, decode) for label, doc in runs}
    title = (
        f"{model.name}, {args.threads} thread{'s' if args.threads != 1 else ''}, "
        f"{args.prompt_tokens} prompt / {args.max_tokens} output "
        f"tokens, batched engine with {parallel} sequences"
    )
    document = {
        "title": title,
        "started_at": started.isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": usable_cores(),
            "python": platform.python_version(),
        },
        "ceiling_prompt_tokens_per_s": ceiling,
        "ceiling_tokens": args.ceiling_tokens,
        "raw_decode_tokens_per_s": decode,
        "targets": TARGETS,
        "checks": checks,
        "runs": dict(runs),
        "throughput_per_round": {
            label: [[lv["summary"]["output_throughput"] for lv in doc["levels"]] for doc in docs]
            for label, docs in rounds.items()
        },
    }
    text = json.dumps(document, indent=2).replace(str(model), model.name)  # no local paths in results
    (out / "batching.json").write_text(text + "\n", encoding="utf-8")
    lines = [
        title,
        "",
        f"Batched-compute ceiling (prompt processing, {args.ceiling_tokens} tokens): {ceiling:.1f} tokens/s.",
        "",
        "Raw `llama_decode` of one token for each of w sequences (no scheduling, sampling or "
        "streaming): " + ", ".join(f"w={w}: {rate:.1f} tokens/s" for w, rate in decode.items()) + ".",
        "",
        markdown_table(runs),
        "8 streams against 1 (targets: throughput >= "
        f"{TARGETS['throughput_x']}x, >= {TARGETS['ceiling_share']:.0%} of the ceiling, "
        f"ITL p50 <= {TARGETS['itl_p50_x']}x):",
        "",
    ]
    for label, check in checks.items():
        if check:
            itl = "-" if check["itl_p50_x"] is None else f"{check['itl_p50_x']:.2f}x"
            line = (
                f"- {label}: throughput {check['throughput_x']:.2f}x, {check['ceiling_share']:.0%} of "
                f"the ceiling, ITL p50 {itl}"
            )
            if "batched" in label and check["decode_share"] is not None:
                line += f"; between tokens, 8 streams decode at {check['decode_share']:.0%} of raw "
                line += "`llama_decode` of 8 sequences"
            lines.append(line)
    (out / "batching.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot(runs, ceiling, decode, out / "batching.png", title)
    print("\n".join(lines))
    print(f"results in {out}/ (batching.md, batching.png, batching.json)", file=sys.stderr)


def plot(runs, ceiling: float, decode: dict[int, float], path: Path, title: str) -> None:
    """Aggregate tokens/s with the ceiling, ITL (median, p99 dashed) and TTFT against streams."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate, itl, ttft) = plt.subplots(1, 3, figsize=(15, 4.8), constrained_layout=True)
    for label, doc in runs:
        levels = [lv for lv in doc["levels"] if lv["summary"]["output_throughput"]]
        xs = [lv["concurrency"] for lv in levels]
        (line,) = rate.plot(
            xs, [lv["summary"]["output_throughput"] for lv in levels], marker="o", label=label
        )
        color = line.get_color()
        with_itl = [lv for lv in levels if lv["summary"]["itl_s"]]
        itl_xs = [lv["concurrency"] for lv in with_itl]
        itl.plot(
            itl_xs, [lv["summary"]["itl_s"]["median"] * 1000 for lv in with_itl], marker="o", color=color
        )
        itl.plot(
            itl_xs, [lv["summary"]["itl_s"]["p99"] * 1000 for lv in with_itl], "--", color=color, alpha=0.6
        )
        with_ttft = [lv for lv in levels if lv["summary"]["ttft_s"]]
        ttft.plot(
            [lv["concurrency"] for lv in with_ttft],
            [lv["summary"]["ttft_s"]["median"] * 1000 for lv in with_ttft],
            marker="o",
            color=color,
        )
    rate.axhline(ceiling, color="grey", linestyle=":", label="ceiling (prompt processing)")
    rate.plot(
        list(decode), list(decode.values()), "k--", alpha=0.5, label="raw llama_decode, 1 token per sequence"
    )
    for axis, name in (
        (rate, "aggregate output tokens/s"),
        (itl, "ITL ms (median, p99 dashed)"),
        (ttft, "TTFT ms (median)"),
    ):
        axis.set_title(name)
        axis.set_xlabel("concurrent streams")
        axis.set_xscale("log", base=2)
        xs = sorted({lv["concurrency"] for _, doc in runs for lv in doc["levels"]})
        axis.set_xticks(xs, [str(x) for x in xs])
        axis.minorticks_off()
        axis.grid(True, alpha=0.3)
    rate.set_ylim(bottom=0)
    itl.set_ylim(bottom=0)
    ttft.set_yscale("log")
    rate.legend(fontsize=8)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
