"""`llmflow serve` (the batched llama.cpp engine on CUDA) against llama.cpp's own `llama-server`,
measured with `llmflow bench` over HTTP, with `llama-batched-bench` as the ceiling: one run, one
GPU, the same GGUF files and the same llama.cpp build (`run_h200.sh bench` runs it).

Per GGUF: `llama-batched-bench` (no server, no sampling; a KV stream per sequence, then one pool),
then every server and `--*-variant` at each concurrency, alternated, for several rounds, with the
same workload on the engine in this process at the top concurrency (what serving costs). A row is
a server's median round by output throughput, so every number in it comes from one real run.
Last, one wave of `parallel` generations straight on the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.record import bench_figures, output, write_split  # noqa: E402
from benchmarks.serve_process import free_port, started  # noqa: E402
from benchmarks.stream_timing import at_once  # noqa: E402
from benchmarks.suite import parser  # noqa: E402
from llmflow.bench import BenchOptions, run_bench  # noqa: E402
from llmflow.bench.driver import parse_list  # noqa: E402

#: the job that runs the servers' workload on the engine in this process
IN_PROCESS = "llmflow in process"


STARTED = time.perf_counter()


def elapsed() -> float:
    """Seconds since the script started: the log's clock, and what `--budget-s` bounds."""
    return time.perf_counter() - STARTED


def log(message: str) -> None:
    print(f"[{elapsed():6.1f}s] {message}", file=sys.stderr, flush=True)


def save(doc: dict[str, Any], out: Path) -> None:
    """The summary to `out`, every request's numbers to `raw/` beside it (`record.write_split`);
    called after every part, so a run cut short keeps what it measured."""
    doc["elapsed_s"] = round(elapsed(), 1)
    write_split(out, doc)


def machine() -> dict[str, Any]:
    query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm"
    gpu = output("nvidia-smi", query, "--format=csv,noheader") or ""
    import llama_cpp

    return {"platform": platform.platform(), "python": platform.python_version(), "gpu": gpu,
            "cpus": len(os.sched_getaffinity(0)), "llama_cpp_python": llama_cpp.__version__}  # fmt: skip


def batched_bench(args: argparse.Namespace, model: Path, unified: bool) -> dict[str, Any]:
    """`llama-batched-bench` at every concurrency, the servers' prompt and answer lengths."""
    command = [
        str(args.bin / "llama-batched-bench"), "-m", str(model), "-ngl", "99", "-fa", "on",
        "-c", str(max(args.concurrency) * args.n_ctx), "-b", "2048", "-ub", "512",
        "-npp", str(args.prompt_tokens), "-ntg", str(args.max_tokens),
        "-npl", ",".join(map(str, args.concurrency)),
        "--output-format", "jsonl", *(["-kvu"] if unified else []),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        return {"command": _portable(command), "error": done.stderr[-2000:]}
    decode = {str(r["pl"]): r["speed_tg"] for r in rows}
    # the generated tokens over prefill and decode together (no overlap: all prompts first)
    generated = {str(r["pl"]): r["pl"] * r["tg"] / (r["t_pp"] + r["t_tg"]) for r in rows}
    return {"command": _portable(command), "rows": rows, "decode_tok_s": decode, "generated_tok_s": generated}


def server_commands(args: argparse.Namespace, model: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    """llmflow serve and llama-server, by name, then each again with the arguments of every
    `--llmflow-variant` / `--llama-server-variant` (`LABEL=ARGS`: e.g. llama-server's backend sampling)."""
    top, options = max(args.concurrency), [f"parallel={max(args.concurrency)}", f"n_ctx={args.n_ctx}"]
    options += args.engine_option
    commands = {}
    for name, more in variants("llmflow", args.llmflow_variant).items():
        commands[name] = [
            sys.executable, "-m", "llmflow", "serve", str(model), "--engine", "llama_cpp_batched",
            "--host", "127.0.0.1", "--port", str(ports[name]), "--max-queue", "4096",
            "--log-level", "warning",
            *[part for option in options for part in ("--engine-option", option)], *more,
        ]  # fmt: skip
    for name, more in variants("llama-server", args.llama_server_variant).items():
        commands[name] = [
            str(args.bin / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
            "--port", str(ports[name]), "-ngl", "99", "-fa", "on", "-c", str(top * args.n_ctx),
            "--parallel", str(top), "-b", "2048", "-ub", "512", "--no-webui", *more,
        ]  # fmt: skip
    return commands


def variants(server: str, specs: list[str]) -> dict[str, list[str]]:
    """A server's runs by name: as it comes, then each `LABEL=ARGS` as `SERVER LABEL`."""
    labelled = (spec.partition("=") for spec in specs)
    return {server: [], **{f"{server} {label}": more.split() for label, _, more in labelled}}


def bench(args: argparse.Namespace, concurrency: int, **target: Any) -> dict[str, Any]:
    """One level of `llmflow bench` against a server (`url`, output re-tokenized with `--tokenizer`
    for every server alike) or on the engine in this process (`model`, `engine_options`)."""
    requests = max(args.min_requests, args.waves * concurrency)
    document = run_bench(BenchOptions(concurrency=(concurrency,), requests=requests, seed=args.seed,
                                      prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                                      **target))  # fmt: skip
    if document["aborted"]:
        raise SystemExit(f"{target.get('url', 'in process')}: {document['aborted']}")
    return document


def serve_and_bench(args: argparse.Namespace, label: str, model: Path) -> dict[str, Any]:
    names = [*variants("llmflow", args.llmflow_variant), *variants("llama-server", args.llama_server_variant)]
    ports = {name: free_port() for name in names}
    commands = server_commands(args, model, ports)
    top = max(args.concurrency)
    order = [names, names[::-1]]  # the servers' order alternates from level to level
    jobs = [(name, c) for i, c in enumerate(args.concurrency) for name in order[i % 2]]
    if "in_process" not in args.skip:  # the serving factor's other side, in the same rounds
        jobs.insert(jobs.index(("llmflow", top)) + 1, (IN_PROCESS, top))
    here = {"model": str(model), "engine_options": engine_options(args)}
    documents: dict[str, dict[int, list[dict[str, Any]]]] = {name: {} for name, _ in jobs}
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        urls = {name: stack.enter_context(started(name, command, ports[name], logs, timeout_s=300))
                for name, command in commands.items()}  # fmt: skip
        log(f"{label}: {len(urls)} servers up")
        for r in range(args.rounds):
            if r > 0 and elapsed() > args.budget_s:
                log(f"{label}: time budget spent after {r} rounds")
                break
            for name, concurrency in jobs if r % 2 == 0 else jobs[::-1]:
                there = {"url": urls[name], "tokenizer": str(args.tokenizer)}
                document = bench(args, concurrency, **(here if name == IN_PROCESS else there))
                documents[name].setdefault(concurrency, []).append(document)
                s = document["levels"][0]["summary"]
                log(f"{label} round {r + 1} {name} c={concurrency}: {s['output_throughput']:.0f} tok/s")
    result = {
        "commands": {name: _portable(command) for name, command in commands.items()},
        "servers": {name: _server_rows(documents[name]) for name in names},
    }
    if documents.get(IN_PROCESS):
        result["in_process_bench"] = _server_rows(documents[IN_PROCESS])[str(top)]
    return result


def _server_rows(by_level: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per level: the figures of the round whose output throughput is the median (the lower middle
    one of an even count), so every number of a row comes from one real run; every round's summary."""
    rows = {}
    for concurrency, documents in by_level.items():
        summaries = [d["levels"][0]["summary"] for d in documents]
        throughputs = [s["output_throughput"] for s in summaries]
        ordered = sorted(range(len(documents)), key=lambda i: throughputs[i] or 0.0)
        median = documents[ordered[(len(documents) - 1) // 2]]["levels"][0]
        summary = median["summary"]
        rows[str(concurrency)] = {
            **bench_figures(summary),
            "output_tok_s_rounds": throughputs,
            "output_tok_s_min_max": [min(throughputs), max(throughputs)],
            "summary_of_median_round": summary,
            "summaries_of_rounds": summaries,
            # a request's raw numbers, without its per-token arrays (they would make the file huge)
            "requests_of_median_round": [
                {k: v for k, v in r.items() if not isinstance(v, list)} for r in median["requests"]
            ],
        }
    return rows


def in_process(args: argparse.Namespace, label: str, model: Path) -> dict[str, Any]:
    """One wave of `parallel` greedy generations of the servers' workload on the engine in this
    process, after a warm-up wave: generated tokens over the wall time, no HTTP."""
    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedEngine
    from llmflow.params import SamplingParams
    from llmflow.types import CancelToken

    options = engine_options(args)
    engine = LlamaCppBatchedEngine.load(model, **options)
    rng = random.Random(args.seed)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)

    def one(_: int) -> int:
        prompt = [rng.randrange(300, engine.n_vocab - 300) for _ in range(args.prompt_tokens)]
        return sum(1 for _ in engine.generate(prompt, params, CancelToken()))

    try:
        for attempt in ("warm-up", "measured"):
            wall, counts = at_once(max(args.concurrency), one)
            log(f"{label} in process ({attempt}): {sum(counts) / wall:.0f} tok/s")
    finally:
        engine.close()
    return {"engine_options": options, "wall_s": wall, "generated_tokens": sum(counts),
            "generated_tok_s": sum(counts) / wall}  # fmt: skip


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """llmflow serve's engine options: `parallel`, `n_ctx`, then every `--engine-option` (JSON
    values as such, anything else as a string)."""
    options: dict[str, Any] = {"parallel": max(args.concurrency), "n_ctx": args.n_ctx}
    for pair in args.engine_option:
        key, _, value = pair.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _portable(command: list[str]) -> list[str]:
    """The command without this machine's paths: file names only (`LABEL=path` keeps its label)."""
    return [_file_name(part) for part in command]


def _file_name(part: str) -> str:
    label, sep, path = part.partition("=")
    if sep and "/" not in label:
        return f"{label}={_file_name(path)}"
    return Path(part).name if "/" in part else part


def main() -> None:
    p = parser(__doc__, "benchmarks/results/llama_cpp_gpu.json", rounds=3, waves=2, min_requests=4,
               prompt_tokens=128, max_tokens=128, n_ctx=1024, seed=0)  # fmt: skip
    # requests per level: waves x concurrency, at least min-requests; n-ctx: every server's per sequence
    p.add_argument("--bin", type=Path, required=True, help="folder with llama-server, llama-batched-bench")
    p.add_argument("--model", action="append", required=True, help="LABEL=PATH of a GGUF file")
    p.add_argument("--tokenizer", type=Path, required=True, help="a GGUF with the same vocabulary")
    p.add_argument("--concurrency", default="1,8,32,64")
    p.add_argument("--engine-option", action="append", default=[], help="KEY=VALUE for llmflow's engine")
    examples = {"llama-server": "backend-sampling=-bs", "llmflow": "si=--switch-interval 0.5"}
    for server, example in examples.items():
        about = f"LABEL=ARGS: {server} once more with these arguments too (e.g. {example})"
        p.add_argument(f"--{server}-variant", action="append", default=[], help=about)
    parts = ["batched_bench", "servers", "in_process", "split"]
    p.add_argument("--skip", action="append", default=[], choices=parts, help="a part of the run to skip")
    p.add_argument("--budget-s", type=float, default=480, help="no new round after this")
    p.add_argument("--commit", default="unknown", help="the llmflow commit measured")
    args = p.parse_args()
    args.concurrency = parse_list(args.concurrency, int, "concurrency")
    config = {k: v for k, v in vars(args).items() if k not in ("model", "bin", "out", "tokenizer", "commit")}
    doc = {"command": " ".join(["benchmarks/gpu/bench_llama_cpp_gpu.py", *_portable(sys.argv[1:])]),
           "commit": args.commit, "machine": machine(), "config": config, "models": {}}  # fmt: skip
    for label, path in (pair.split("=", 1) for pair in args.model):
        model = Path(path)
        entry: dict[str, Any] = doc["models"].setdefault(label, {"file": model.name})
        if "batched_bench" not in args.skip:
            entry["batched_bench"] = {"streams": batched_bench(args, model, unified=False),
                                      "unified": batched_bench(args, model, unified=True)}  # fmt: skip
            save(doc, args.out)
        if "servers" not in args.skip:
            entry.update(serve_and_bench(args, label, model))
            save(doc, args.out)
        if "split" not in args.skip:
            entry["in_process"] = in_process(args, label, model)
            save(doc, args.out)


if __name__ == "__main__":
    main()
