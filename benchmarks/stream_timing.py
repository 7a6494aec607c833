"""The timings every in-process benchmark takes: one stream read to its end (`time_stream`), and
several generations started together (`at_once`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def time_stream(
    start_stream: Callable[[], Iterable[Any]], final_tokens: Callable[[Any], int | None] | None = None
) -> tuple[float, float, int]:
    """Start a chunk stream and read it to the end: (TTFT in s, decode tokens/s after the first
    token, tokens generated as the final chunk's usage counts them). `final_tokens`: a chunk's
    token count when it is the final one, else None (default: llmflow's `Chunk`)."""
    final_tokens = final_tokens or (lambda chunk: chunk.usage.completion_tokens if chunk.is_final else None)
    start, first, tokens = time.perf_counter(), None, 0
    for chunk in start_stream():
        counted = final_tokens(chunk)
        if counted is not None:
            tokens = counted
        elif first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return first - start, (tokens - 1) / (end - first), tokens


def decode_speed(chunks: Iterable[Any]) -> tuple[float, int, str]:
    """(decode tokens/s from the first token to the last, tokens as the final chunk counts them,
    text) of one stream of llmflow chunks."""
    first = last = None
    tokens, pieces = 0, []
    for chunk in chunks:
        now = time.perf_counter()
        if chunk.is_final:
            tokens = chunk.usage.completion_tokens
        else:
            pieces.append(chunk.text)
            first = first or now
            last = now
    rate = (tokens - 1) / (last - first) if first and last and last > first else 0.0
    return rate, tokens, "".join(pieces)


def at_once(count: int, run: Callable[[int], Any]) -> tuple[float, list[Any]]:
    """`run(0)` ... `run(count - 1)` in threads released together: (wall seconds from the release
    until all have returned, their results)."""
    barrier = threading.Barrier(count + 1)

    def one(i: int) -> Any:
        barrier.wait()
        return run(i)

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(one, i) for i in range(count)]
        barrier.wait()
        start = time.perf_counter()
        results = [future.result() for future in futures]
        return time.perf_counter() - start, results


def ttft_and_rate(results: dict[str, list[tuple[float, float, int]]]) -> tuple[dict, dict]:
    """Each side's TTFT in ms and decode tokens/s, run by run, from its `time_stream` results."""
    ttft = {name: [r[0] * 1000 for r in runs] for name, runs in results.items()}
    return ttft, {name: [r[1] for r in runs] for name, runs in results.items()}


def stream_record(
    llm: Any, args: Any, prompt: str, results: dict[str, list[tuple[float, float, int]]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config and samples of a result made of `time_stream` runs, side by side."""
    config = {"model": llm.model_name, "threads": llm.engine.options.n_threads, "max_tokens": args.max_tokens,
              "runs": args.runs, "prompt": prompt}  # fmt: skip
    keys = ("ttft_s", "decode_tok_s", "tokens")
    return config, {name: [dict(zip(keys, r, strict=True)) for r in runs] for name, runs in results.items()}
