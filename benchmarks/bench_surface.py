"""What the OpenAI surface beyond plain chat costs, on the embedded model in process, each pair
measured in the same run with its sides alternated round by round:

- embeddings/s for a batch of 64 short inputs: `llmflow.embeddings.embed` against
  llama-cpp-python's `Llama.embed` on the same GGUF (both mean pooling, normalised, one thread
  count, a 512-token window);
- decode tokens/s with logprobs (top 5) on against off (target >= 0.95), `llama_cpp` engine;
- `n=4` on the batching engine (the prompt computed once, its KV cache copied) against 4
  separate requests sent at once: aggregate tokens/s, a long prompt (target >= 1.3x). Every
  round's prompt starts differently, so no round reuses a cached prompt of another.

    python -m benchmarks.bench_surface --rounds 5
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from llmflow import LLM
from llmflow.choices import stream_choices
from llmflow.embeddings import embed
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import resolve_model_path
from llmflow.types import CancelToken

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, paired_ratios, spread

TEXTS = [f"Sentence number {i}: the quick brown fox jumps over the lazy dog." for i in range(64)]
STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
LONG_PROMPT = " ".join(
    f"Chapter {i}. The fisherman mended his nets, watched the tide and told the children about "
    "the storms of his youth, the boats he had lost and the fish he had caught."
    for i in range(12)
)


def embeddings_rate(embed_once: Any) -> float:
    start = time.perf_counter()
    vectors = embed_once()
    elapsed = time.perf_counter() - start
    assert len(vectors) == len(TEXTS)
    return len(TEXTS) / elapsed


def bench_embeddings(rounds: int, threads: int) -> tuple[dict[str, Any], dict[str, Any]]:
    import llama_cpp

    path = str(resolve_model_path(None))
    options = {"pooling": "mean", "n_ctx": 512, "n_threads": threads}
    llm = LLM.load(engine="llama_cpp", engine_options=options)
    peer = llama_cpp.Llama(
        model_path=path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, n_ctx=512,
        n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False,
    )  # fmt: skip
    sides = {
        "llmflow": lambda: embed(llm, TEXTS).vectors,
        "llama_cpp_python": lambda: peer.embed(TEXTS, normalize=True),
    }
    for run in sides.values():  # warm-up (llmflow makes its embedding context here)
        run()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(rounds):
        for name in list(sides)[i % 2 :] + list(sides)[: i % 2]:
            rates[name].append(embeddings_rate(sides[name]))
    llm.close()
    peer.close()
    summary = {f"{name}_embeddings_per_s": spread(values) for name, values in rates.items()}
    summary["ratio_llmflow_over_llama_cpp_python"] = paired_ratios(
        rates["llmflow"], rates["llama_cpp_python"]
    )
    return rates, summary


def decode_rate(llm: LLM, params: dict[str, Any]) -> float:
    """Decode tokens/s after the first token, as the consumer sees them."""
    first = None
    tokens = 0
    for chunk in llm.stream(STORY, params, raw=True):
        if chunk.is_final:
            tokens = chunk.usage.completion_tokens
        elif first is None:
            first = time.perf_counter()
    assert first is not None
    return (tokens - 1) / (time.perf_counter() - first)


def bench_logprobs(rounds: int, threads: int, max_tokens: int) -> tuple[dict[str, Any], dict[str, Any]]:
    llm = LLM.load(engine="llama_cpp", engine_options={"n_threads": threads})
    base = {"temperature": 0.0, "max_tokens": max_tokens}
    sides = {"off": base, "on": {**base, "logprobs": 5}}
    for params in sides.values():
        decode_rate(llm, {**params, "max_tokens": 16})
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(rounds):
        for name in list(sides)[i % 2 :] + list(sides)[: i % 2]:
            rates[name].append(decode_rate(llm, sides[name]))
    llm.close()
    summary = {f"{name}_tokens_per_s": spread(values) for name, values in rates.items()}
    summary["ratio_on_over_off"] = paired_ratios(rates["on"], rates["off"])
    return rates, summary


def choices_rate(llm: LLM, prompt: str, params: dict[str, Any], shared: bool) -> float:
    """Aggregate completion tokens/s of 4 answers: one n=4 request, or 4 requests at once."""
    start = time.perf_counter()
    if shared:
        request = llm.prepare(prompt, params, raw=True)
        final = [c.chunk for c in stream_choices(llm, request, 4, CancelToken()) if c.chunk.usage is not None]
        tokens = final[-1].usage.completion_tokens
    else:
        counts: list[int] = []

        def one(seed: int) -> None:
            *_, last = llm.stream(prompt, {**params, "seed": seed}, raw=True)
            counts.append(last.usage.completion_tokens)

        workers = [threading.Thread(target=one, args=(params["seed"] + i,)) for i in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        tokens = sum(counts)
    return tokens / (time.perf_counter() - start)


def bench_choices(rounds: int, threads: int, max_tokens: int) -> tuple[dict[str, Any], dict[str, Any]]:
    llm = LLM.load(engine="llama_cpp_batched", engine_options={"n_threads": threads, "parallel": 4})
    params = {"temperature": 0.8, "max_tokens": max_tokens, "seed": 11}
    choices_rate(llm, "warm-up " + STORY, {**params, "max_tokens": 8}, True)
    rates: dict[str, list[float]] = {"n4": [], "separate4": []}
    for i in range(rounds):
        for name in list(rates)[i % 2 :] + list(rates)[: i % 2]:
            prompt = f"[{i} {name}] {LONG_PROMPT}"
            rates[name].append(choices_rate(llm, prompt, params, shared=name == "n4"))
    prompt_tokens = len(llm.prepare(LONG_PROMPT, params, raw=True).prompt_ids)
    llm.close()
    summary = {f"{name}_tokens_per_s": spread(values) for name, values in rates.items()}
    summary["ratio_n4_over_separate4"] = paired_ratios(rates["n4"], rates["separate4"])
    summary["prompt_tokens"] = prompt_tokens
    return rates, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="default: all usable cores")
    parser.add_argument("--parts", default="embeddings,logprobs,choices")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/surface.json"))
    args = parser.parse_args()
    recording = Recording.begin("surface")
    threads = args.threads or usable_cores()
    parts = args.parts.split(",")
    samples: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    if "embeddings" in parts:
        samples["embeddings"], summary["embeddings"] = bench_embeddings(args.rounds, threads)
    if "logprobs" in parts:
        samples["logprobs"], summary["logprobs"] = bench_logprobs(args.rounds, threads, args.max_tokens)
    if "choices" in parts:
        samples["choices"], summary["choices"] = bench_choices(args.rounds, threads, args.max_tokens)
    config = {
        "model": resolve_model_path(None).name,
        "threads": threads,
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "embedding_inputs": len(TEXTS),
    }
    recording.write(
        args.out, config=config, samples=samples, summary=summary, hide=[resolve_model_path(None)]
    )


if __name__ == "__main__":
    main()
