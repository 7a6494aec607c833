"""What `llmflow serve` costs a batching engine whose steps take a fixed time, as on a GPU.

On one H200 a step of 64 sequences takes 13-16 ms, and inside `llmflow serve` the engine's
forward pass took about 2.8 ms longer than in process (`bench_llama_cpp_gpu.py --served-steps`):
after each pass the decode thread waits for the GIL while the event loop streams the last step's
tokens. This reproduces the serving side without a GPU: the real `BatchScheduler` over a backend
whose forward pass sleeps (letting go of the GIL as `llama_decode` does;
`tests/fakes/stepped_engine.py`), byte-level tokens, no prompt cost, served by the real server in
its own process (`uvicorn_server.run`, as `llmflow serve` runs it) and read by `llmflow bench`.

Prompts cost no time here (over HTTP they are `llmflow bench`'s synthetic prompts, counted in
the embedded model's tokens; the engine splits them into bytes). Reported per concurrency:
output tokens/s over HTTP (the server's usage counts), the same
generations read by threads in this process (no server), and the ceiling (streams / step time);
servers with other options (`--variant NAME=--switch-interval 0.5`) alternate with the default
each round, the starting one rotating.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_serving_steps.py --concurrency 32,64 --rounds 5
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, spread
from serve_process import free_port, started

from llmflow.bench.driver import BenchOptions, run_bench
from llmflow.engines.base import token_request
from llmflow.params import SamplingParams
from llmflow.types import CancelToken


def serve(args: argparse.Namespace) -> None:
    """The server process: the stepped engine behind `create_app`, run as `llmflow serve` runs."""
    from llmflow import LLM
    from llmflow.server import ServedModel, ServerSettings, create_app
    from llmflow.server.uvicorn_server import run
    from tests.fakes.stepped_engine import SteppedEngine

    engine = SteppedEngine(parallel=args.parallel, decode_s=args.step_ms / 1000)
    served = ServedModel.from_llm(LLM(engine), name="stepped")
    settings = ServerSettings(max_queue=args.parallel * 4, max_connections=args.parallel * 8)
    run(create_app(served, settings), "127.0.0.1", args.port, log_level="warning",
        switch_interval_ms=args.switch_interval)  # fmt: skip


def in_process(step_ms: float, parallel: int, streams: int, max_tokens: int, prompt: list[int]) -> float:
    """Tokens/s of one wave of `streams` generations, each read by a thread of its own."""
    from tests.fakes.stepped_engine import SteppedEngine

    engine = SteppedEngine(parallel=parallel, decode_s=step_ms / 1000)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    counts = [0] * streams

    def read(i: int) -> None:
        request = token_request(prompt, params, CancelToken(), len(prompt) + max_tokens)
        for _ in engine.tokens(request):
            counts[i] += 1

    try:
        threads = [threading.Thread(target=read, args=(i,)) for i in range(streams)]
        started_at = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - started_at)
    finally:
        engine.close()


def server_command(args: argparse.Namespace, port: int, extra: list[str]) -> list[str]:
    return [sys.executable, __file__, "serve", "--port", str(port), "--step-ms", str(args.step_ms),
            "--parallel", str(args.parallel), *extra]  # fmt: skip


def over_http(url: str, options: BenchOptions) -> dict[str, Any]:
    document = run_bench(replace(options, url=url))
    summary = document["levels"][0]["summary"] if document["levels"] else {}
    return {
        "output_tokens_per_s": summary.get("output_throughput"),
        "ttft_p50_ms": _ms((summary.get("ttft_s") or {}).get("median")),
        "itl_p50_ms": _ms((summary.get("itl_s") or {}).get("median")),
        "failed": summary.get("failed"),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    server = sub.add_parser("serve")
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--step-ms", type=float, required=True)
    server.add_argument("--parallel", type=int, required=True)
    server.add_argument("--switch-interval", type=float, default=None)
    parser.add_argument("--step-ms", type=float, default=13.5, help="a forward pass's time (GPU, 64 streams)")
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--waves", type=int, default=2, help="requests per level = waves x concurrency")
    parser.add_argument("--variant", action="append", default=[], help="NAME=SERVER OPTIONS")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.mode == "serve":
        serve(args)
        return
    recording = Recording.begin("serving_steps", args.quick)
    levels = [int(c) for c in args.concurrency.split(",")]
    servers = {"default": [], **{n: shlex.split(o) for n, o in (v.split("=", 1) for v in args.variant)}}
    http: dict[str, dict[int, list[dict[str, Any]]]] = {s: {c: [] for c in levels} for s in servers}
    local: dict[int, list[float]] = {c: [] for c in levels}
    prompt = list(b"x" * args.prompt_tokens)
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            order = list(servers)[round_ % len(servers) :] + list(servers)[: round_ % len(servers)]
            for name in order:
                port = free_port()
                with started(name, server_command(args, port, servers[name]), port, Path(logs)) as url:
                    for c in levels:
                        options = BenchOptions(
                            api="completions", concurrency=(c,), requests=c * args.waves,
                            prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                            seed=round_, tokenizer="embedded",
                        )  # fmt: skip
                        http[name][c].append(over_http(url, options))
                        print(f"round {round_ + 1} {name} c={c}: {http[name][c][-1]}", flush=True)
            for c in levels:
                local[c].append(in_process(args.step_ms, args.parallel, c, args.max_tokens, prompt))
    summary: dict[str, Any] = {}
    for c in levels:
        in_process_speed = spread(local[c])
        row: dict[str, Any] = {
            "ceiling_tokens_per_s": c / (args.step_ms / 1000),
            "in_process_tokens_per_s": in_process_speed,
        }
        for name in servers:
            samples = http[name][c]
            tok_s = spread(s["output_tokens_per_s"] for s in samples)
            row[name] = {
                "output_tokens_per_s": tok_s,
                "ttft_p50_ms": spread(s["ttft_p50_ms"] for s in samples),
                "itl_p50_ms": spread(s["itl_p50_ms"] for s in samples),
                "failed": sum(s["failed"] or 0 for s in samples),
                "over_in_process": tok_s and tok_s["median"] / in_process_speed["median"],
            }
        summary[str(c)] = row
        print(c, row, flush=True)
    config = {k: v for k, v in vars(args).items() if k not in ("out", "mode")}
    if args.out:
        recording.write(args.out, config=config, samples={"http": http, "in_process": local}, summary=summary)


if __name__ == "__main__":
    main()
