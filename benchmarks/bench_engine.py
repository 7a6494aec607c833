"""llmflow's in-process stream against raw llama-cpp-python on the same model object.

Same GGUF, same prompt, greedy, the same thread count, both in this thread; runs alternate and
start with an empty KV cache, so both pay the same prompt processing. Reports medians and the
ratios.

    .venv/bin/python benchmarks/bench_engine.py --runs 7 --max-tokens 256
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from llmflow import LLM

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def run_llmflow(llm: LLM, max_tokens: int) -> tuple[float, float, int]:
    llm.engine._llama.reset()
    start = time.perf_counter()
    first = None
    tokens = 0
    for chunk in llm.stream(PROMPT, {"temperature": 0.0, "max_tokens": max_tokens}, raw=True):
        if chunk.is_final:
            tokens = chunk.usage.completion_tokens
        elif first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return first - start, (tokens - 1) / (end - first), tokens


def run_raw(llm: LLM, max_tokens: int) -> tuple[float, float, int]:
    llama = llm.engine._llama
    llama.reset()
    start = time.perf_counter()
    first = None
    tokens = 0
    for part in llama.create_completion(PROMPT, max_tokens=max_tokens, temperature=0.0, stream=True):
        choice = part["choices"][0]
        if first is None and choice["text"]:
            first = time.perf_counter()
        if choice["finish_reason"] is None:
            tokens += 1  # one part per generated token (empty text while UTF-8 is incomplete)
    end = time.perf_counter()
    return first - start, (tokens - 1) / (end - first), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None, help="default: all usable cores")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/engine.json"))
    args = parser.parse_args()

    options = {} if args.threads is None else {"n_threads": args.threads}
    llm = LLM.load(engine_options=options)
    run_llmflow(llm, 16)  # warm-up both paths
    run_raw(llm, 16)
    results: dict[str, list[tuple[float, float, int]]] = {"llmflow": [], "raw": []}
    for i in range(args.runs):
        order = [("llmflow", run_llmflow), ("raw", run_raw)]
        if i % 2:
            order.reverse()
        for name, fn in order:
            results[name].append(fn(llm, args.max_tokens))

    def med(name: str, index: int) -> float:
        return statistics.median(r[index] for r in results[name])

    summary = {
        "model": llm.model_name,
        "threads": llm.engine.options.n_threads,
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "tokens": {name: [r[2] for r in rs] for name, rs in results.items()},
        "llmflow_tokens_per_s": med("llmflow", 1),
        "raw_tokens_per_s": med("raw", 1),
        "llmflow_ttft_ms": med("llmflow", 0) * 1000,
        "raw_ttft_ms": med("raw", 0) * 1000,
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }
    summary["tokens_per_s_ratio"] = summary["llmflow_tokens_per_s"] / summary["raw_tokens_per_s"]
    summary["ttft_delta_ms"] = summary["llmflow_ttft_ms"] - summary["raw_ttft_ms"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
