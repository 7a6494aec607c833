"""Does tracing slow streaming down? `predict_stream` tokens/s with MLflow tracing on vs off.

Modes (off, on, timings only) alternate, each run from an empty KV cache; traces go to a temporary
sqlite store. The observing wrapper's own cost per chunk is measured on a synthetic stream, where
decoding noise does not hide it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import mlflow

from benchmarks.record import Recording, alternated, paired_ratios, spread
from benchmarks.stream_timing import stream_record, time_stream, ttft_and_rate
from benchmarks.suite import parser
from llmflow import LLM
from llmflow.mlflow import LlmflowPyfuncModel
from llmflow.observability import ObservedGeneration, ObservedStream, RequestTimings, RequestTrace
from llmflow.types import CancelToken, Chunk, FinishReason, Usage

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
MODES: dict[str, dict[str, Any]] = {"off": {"trace": False}, "on": {"trace": True},
                                    "timings": {"trace": False, "timings": True}}  # fmt: skip


def run_stream(model: LlmflowPyfuncModel, max_tokens: int, mode: str) -> tuple[float, float, int]:
    """(ttft_s, decode tokens/s, tokens) as the consumer sees them, `RequestTimings`' formula."""
    model.llm.engine.llama.reset()
    params = {"temperature": 0.0, "max_tokens": max_tokens, **MODES[mode]}
    return time_stream(
        lambda: model.predict_stream(None, {"prompt": PROMPT}, params=params),
        lambda chunk: chunk["usage"]["completion_tokens"] if chunk.get("finish_reason") else None,
    )


def wrapper_cost_us(chunks: int, traced: bool) -> float:
    """Microseconds per chunk that `ObservedStream` adds to iterating a ready-made stream."""
    items = [Chunk("tok")] * chunks + [Chunk("", FinishReason.LENGTH, Usage(10, chunks))]

    def plain() -> float:
        start = time.perf_counter()
        for _ in iter(items):
            pass
        return time.perf_counter() - start

    def observed() -> float:
        trace = RequestTrace("bench", {"prompt": "x"}) if traced else None  # the appends, no span
        stream = ObservedStream(iter(items), CancelToken(), ObservedGeneration(RequestTimings(), trace))
        start = time.perf_counter()
        for _ in stream:
            pass
        return time.perf_counter() - start

    plain_s = statistics.median(plain() for _ in range(5))
    observed_s = statistics.median(observed() for _ in range(5))
    return (observed_s - plain_s) / chunks * 1e6


def main() -> None:
    args = parser(__doc__, "benchmarks/results/tracing.json", runs=9, max_tokens=256).parse_args()
    recording = Recording.begin("tracing")
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.set_tracking_uri(f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        experiment_id = mlflow.MlflowClient().create_experiment("bench", artifact_location=Path(tmp).as_uri())
        os.environ["MLFLOW_EXPERIMENT_ID"] = experiment_id
        config, samples, summary = _measure(args)
        mlflow.flush_trace_async_logging()
        summary["traces_recorded"] = len(mlflow.search_traces(locations=[experiment_id], return_type="list"))
    recording.write(args.out, config=config, samples=samples, summary=summary)


def _measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    llm = LLM.load()
    model = LlmflowPyfuncModel.from_llm(llm)
    for mode in MODES:  # warm-up: the first trace also starts MLflow's tracer
        run_stream(model, 16, mode)
    sides = {name: partial(run_stream, model, args.max_tokens, name) for name in MODES}
    results = alternated(sides, args.runs, warm_up=False)
    config, samples = stream_record(llm, args, PROMPT, results)
    ttft, rate = ttft_and_rate(results)
    summary: dict[str, Any] = {}
    for name in MODES:
        summary[f"{name}_tokens_per_s"], summary[f"{name}_ttft_ms"] = spread(rate[name]), spread(ttft[name])
    summary["tokens_per_s_ratio_on_off"] = paired_ratios(rate["on"], rate["off"])  # target >= 0.98
    summary["tokens_per_s_ratio_timings_off"] = paired_ratios(rate["timings"], rate["off"])
    wrapper = {mode: [wrapper_cost_us(100_000, traced=mode == "traced") for _ in range(5)]
               for mode in ("timings", "traced")}  # fmt: skip
    samples["wrapper_us_per_chunk"] = wrapper
    summary["wrapper_us_per_chunk"] = {mode: spread(values) for mode, values in wrapper.items()}
    llm.close()
    return config, samples, summary


if __name__ == "__main__":
    main()
