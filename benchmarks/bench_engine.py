"""llmflow's in-process stream against raw llama-cpp-python on the same model object.

Same GGUF, prompt and threads, greedy, both in this thread; runs alternate and start from an
empty KV cache, so both pay the same prompt processing; ratios are taken round by round.
"""

from __future__ import annotations

import time
from functools import partial

from benchmarks.record import Recording, alternated, paired_ratios, spread
from benchmarks.stream_timing import stream_record, time_stream, ttft_and_rate
from benchmarks.suite import parser
from llmflow import LLM

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def run_llmflow(llm: LLM, max_tokens: int) -> tuple[float, float, int]:
    llm.engine.llama.reset()
    return time_stream(lambda: llm.stream(PROMPT, {"temperature": 0.0, "max_tokens": max_tokens}, raw=True))


def run_raw(llm: LLM, max_tokens: int) -> tuple[float, float, int]:
    llama = llm.engine.llama
    llama.reset()
    start, first, tokens = time.perf_counter(), None, 0
    for part in llama.create_completion(PROMPT, max_tokens=max_tokens, temperature=0.0, stream=True):
        choice = part["choices"][0]
        if first is None and choice["text"]:
            first = time.perf_counter()
        if choice["finish_reason"] is None:
            tokens += 1  # one part per generated token (empty text while UTF-8 is incomplete)
    end = time.perf_counter()
    return first - start, (tokens - 1) / (end - first), tokens


def main() -> None:
    args = parser(__doc__, "benchmarks/results/engine.json", runs=7, max_tokens=256).parse_args()
    recording = Recording.begin("engine")
    llm = LLM.load()
    run_llmflow(llm, 16)  # warm-up both paths
    run_raw(llm, 16)
    sides = {"llmflow": partial(run_llmflow, llm, args.max_tokens),
             "raw": partial(run_raw, llm, args.max_tokens)}  # fmt: skip
    results = alternated(sides, args.runs, warm_up=False)
    ttft, rate = ttft_and_rate(results)
    summary = {
        "llmflow_tokens_per_s": spread(rate["llmflow"]),
        "raw_tokens_per_s": spread(rate["raw"]),
        "llmflow_ttft_ms": spread(ttft["llmflow"]),
        "raw_ttft_ms": spread(ttft["raw"]),
        # round by round: both sides ran in the same round
        "tokens_per_s_ratio": paired_ratios(rate["llmflow"], rate["raw"]),
        "ttft_delta_ms": spread(a - b for a, b in zip(ttft["llmflow"], ttft["raw"], strict=True)),
        "targets": {"tokens_per_s_ratio": ">= 0.98", "ttft_delta_ms": "<= 5"},
    }
    config, samples = stream_record(llm, args, PROMPT, results)
    recording.write(args.out, config=config, samples=samples, summary=summary)


if __name__ == "__main__":
    main()
