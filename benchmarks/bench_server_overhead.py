"""The server's own cost per streamed event, without a model: before/after a change to the server.

A scripted engine (tests/fakes: one byte a token, no decoding) behind the real server on
127.0.0.1, read with a lean client (httpx, one line at a time): what is left is the server's code
per event (admission, worker hand-off, the streaming loop, the formatter, the SSE response) and the
client's. Each tree runs in its own process; rounds alternate the trees and the starting one, so a
busy machine slows both alike. Reports events/s and CPU µs per event (this process: server and
client together), median with min-max over rounds.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_server_overhead.py --tree OLD_CHECKOUT --tree .
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(events: int, runs: int) -> dict[str, list[float]]:
    """In this process: the tree on sys.path serves a scripted answer of `events` tokens."""
    import httpx

    from llmflow import LLM
    from llmflow.server import ServedModel, ServerSettings, create_app
    from llmflow.server.uvicorn_server import BackgroundServer
    from tests.fakes.scripted_engine import ScriptedEngine

    served = ServedModel.from_llm(LLM(ScriptedEngine(answer="a" * events, n_ctx=events + 64)))
    body = {"model": served.name, "prompt": "x", "max_tokens": events, "temperature": 0, "stream": True}
    rates, cpu = [], []
    with (
        BackgroundServer(create_app(served, ServerSettings())) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        for run in range(runs + 1):  # the first is a warm-up
            wall, started_cpu, count = time.perf_counter(), time.process_time(), 0
            with http.stream("POST", "/v1/completions", json=body) as response:
                for line in response.iter_lines():
                    count += line.startswith("data: {")
            wall, used = time.perf_counter() - wall, time.process_time() - started_cpu
            if run:
                rates.append(count / wall)
                cpu.append(used / count * 1e6)
    return {"events_per_s": rates, "cpu_us_per_event": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree", action="append", type=Path, required=True, help="a checkout (twice: old, new)"
    )
    parser.add_argument("--label", action="append", default=None, help="a name per tree (default: old, new)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="streams per tree per round")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/server_overhead.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.events, args.runs)))
        return
    trees = [tree.resolve() for tree in args.tree]
    labels = dict(zip(trees, args.label or ["old", "new"], strict=True))
    samples: dict[str, dict[str, list[float]]] = {
        label: {"events_per_s": [], "cpu_us_per_event": []} for label in labels.values()
    }
    for round_ in range(args.rounds):
        order = trees if round_ % 2 == 0 else trees[::-1]
        for tree in order:
            command = [sys.executable, __file__, "--child", "--tree", str(tree), "--runs", str(args.runs),
                       "--events", str(args.events)]  # fmt: skip
            env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
            result = json.loads(
                subprocess.run(command, cwd=tree, env=env, capture_output=True, check=True, text=True).stdout
            )
            for key, values in result.items():
                samples[labels[tree]][key].extend(values)
    summary = {
        label: {
            key: {"median": statistics.median(v), "min": min(v), "max": max(v)} for key, v in values.items()
        }
        for label, values in samples.items()
    }
    document = {
        "benchmark": "bench_server_overhead",
        "settings": {"rounds": args.rounds, "runs": args.runs, "events": args.events, "trees": args.label},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "summary": summary,
        "samples": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
