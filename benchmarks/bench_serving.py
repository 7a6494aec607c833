"""`llmflow serve` under many concurrent streams on the CPU: output tok/s and the tails of
inter-token latency and time to first token, over HTTP as clients see them.

One server (batching engine, `--concurrency` sequences) answers `llmflow bench`'s greedy workload
once per round. Its use is a change's before and after, both trees alternated in one run:

    python -m benchmarks.compare_trees --tree OLD_CHECKOUT --tree . --rounds 5 \\
        --script benchmarks/bench_serving.py --args "--rounds 1" \\
        --figure output_tok_s --figure itl_p99_s --out benchmarks/results/serving_before_after.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.record import Recording, bench_figures, spread
from benchmarks.serve_process import free_port, llmflow_serve, started
from benchmarks.suite import parser
from llmflow.bench import BenchOptions, run_bench
from llmflow.engines.llama_cpp import usable_cores


def bench(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """One level of `llmflow bench` against the server: the figures of its summary."""
    options = BenchOptions(url=url, concurrency=(args.concurrency,), requests=args.requests,
                           prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                           seed=args.seed)  # fmt: skip
    document = run_bench(options)
    if document["aborted"]:
        raise SystemExit(f"llmflow bench stopped: {document['aborted']}")
    return bench_figures(document["levels"][0]["summary"])


def main() -> None:
    # --requests: per round
    p = parser(__doc__, "benchmarks/results/serving.json", concurrency=16, requests=48, prompt_tokens=64,
               max_tokens=64, rounds=3, seed=0)  # fmt: skip
    p.add_argument("--threads", type=int, default=usable_cores())
    args = p.parse_args()
    recording = Recording.begin("serving")
    port = free_port()
    command = llmflow_serve(port, "--engine", "llama_cpp_batched", "--max-queue", "4096",
                            "--parallel", str(args.concurrency), "--threads", str(args.threads))  # fmt: skip
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as logs, started("llmflow", command, port, Path(logs)) as url:
        for r in range(args.rounds):
            rounds.append(bench(args, url))
            print(f"round {r + 1}: {rounds[-1]['output_tok_s']:.1f} tok/s", flush=True)
    summary = {key: spread(r[key] for r in rounds) for key in rounds[0]}
    config = {k: v for k, v in vars(args).items() if k != "out"}
    recording.write(args.out, config=config, samples=rounds, summary=summary)


if __name__ == "__main__":
    main()
