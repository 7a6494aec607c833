"""What one scheduler step costs on llama.cpp, by how it is cut into forward passes.

While `w` sequences decode, a new request's prompt of `P` tokens has to be computed. Three ways
of doing the same work (w decode tokens a step for ceil(P / chunk) steps, plus the P prompt tokens):

- `own_passes_chunked`: as llmflow's batching engine does it: a KV stream per sequence
  (`kv_unified` off), every step one pass for the w decode tokens, then one pass of its own for
  the next `chunk` prompt tokens;
- `own_passes_whole`: the same, but the whole prompt in one pass of its own in the first step;
- `fused_unified`: one KV cache for all sequences (`kv_unified` on, as llama-cpp-python's example
  server's default), the whole prompt in the same pass as the first step's decode tokens;
- `decode_only_own`, `decode_only_unified`: the decode steps alone, on either cache (what a step
  costs the running streams when no prompt is waiting).

With a KV stream per sequence llama.cpp can only put sequences with equally many tokens into one
micro-batch, so decode and prompt tokens cannot share a pass; a unified cache lifts that. The ways
alternate each round; the summary gives tokens/s with min-max and the ratios round by round.

    python -m benchmarks.bench_step_shapes --rounds 5
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, paired_ratios, spread

WAYS = ("own_passes_chunked", "own_passes_whole", "fused_unified", "decode_only_own", "decode_only_unified")
UNIFIED = {"fused_unified", "decode_only_unified"}


def backend(model_path: Path, args: argparse.Namespace, unified: bool) -> Any:
    """A `LlamaStepBackend` as the batching engine makes it, with or without a unified KV cache."""
    import llama_cpp

    from llmflow.engines.llama_cpp import resolve_load
    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedOptions, LlamaStepBackend, _load_model

    options = LlamaCppBatchedOptions.parse(
        {
            "n_threads": args.threads,
            "n_ctx": args.n_ctx,
            "parallel": args.width + 1,
            "n_batch": 512,
            "kv_unified": unified,
        }
    )
    options, where = resolve_load(llama_cpp, options)
    model = _load_model(llama_cpp, model_path, options, where)
    return LlamaStepBackend.create(llama_cpp, model, options, where)


def one_run(step_backend: Any, way: str, args: argparse.Namespace, greedy: Any, salt: int) -> float:
    """Seconds for the whole work of one way; the KV cache is put back as it was afterwards."""
    from llmflow.engines.scheduler import BatchEntry

    w, depth, chunk = args.width, args.depth, args.chunk
    prompt = [(1000 + salt * 131 + i * 37) % 40000 + 100 for i in range(args.prompt)]
    steps = math.ceil(len(prompt) / chunk)
    new = w  # the new request's sequence

    def decode_entries(step: int) -> list:
        return [BatchEntry(q, [200 + step], depth + step, True, greedy) for q in range(w)]

    def prompt_entry(start: int, end: int) -> Any:
        return BatchEntry(new, prompt[start:end], start, end == len(prompt), greedy)

    started = time.perf_counter()
    for step in range(steps):
        if way.startswith("decode_only"):
            step_backend.decode(decode_entries(step))
            continue
        if way == "fused_unified":
            extra = [prompt_entry(0, len(prompt))] if step == 0 else []
            step_backend.decode(decode_entries(step) + extra)
            continue
        step_backend.decode(decode_entries(step))
        if way == "own_passes_chunked":
            step_backend.decode([prompt_entry(step * chunk, min((step + 1) * chunk, len(prompt)))])
        elif step == 0:
            step_backend.decode([prompt_entry(0, len(prompt))])
    elapsed = time.perf_counter() - started
    for q in range(w):
        step_backend.truncate(q, depth)
    step_backend.truncate(new, 0)
    return elapsed


def fill(step_backend: Any, args: argparse.Namespace, greedy: Any) -> None:
    """Give each decoding sequence `depth` tokens of context."""
    from llmflow.engines.scheduler import BatchEntry

    history = [(100 + i * 37) % 40000 + 100 for i in range(args.depth)]
    for q in range(args.width):
        step_backend.decode([BatchEntry(q, history, 0, True, greedy)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--width", type=int, default=8, help="sequences decoding")
    parser.add_argument("--depth", type=int, default=160, help="tokens each decoding sequence holds")
    parser.add_argument("--prompt", type=int, default=96, help="tokens of the new request's prompt")
    parser.add_argument("--chunk", type=int, default=32, help="the engine's prefill_chunk")
    parser.add_argument("--n-ctx", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/step_shapes.json"))
    args = parser.parse_args()
    recording = Recording.begin("step_shapes")
    from llmflow.params import SamplingParams

    model = (args.model or default_model_path()).resolve()
    backends = {False: backend(model, args, unified=False), True: backend(model, args, unified=True)}
    greedies = {
        unified: b.new_sampler(SamplingParams.parse({"temperature": 0.0})) for unified, b in backends.items()
    }
    try:
        for unified, b in backends.items():
            fill(b, args, greedies[unified])
        for way in WAYS:  # warm-up
            unified = way in UNIFIED
            one_run(backends[unified], way, args, greedies[unified], salt=0)
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        for r in range(args.rounds):
            for way in WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]:
                unified = way in UNIFIED
                samples[way].append(one_run(backends[unified], way, args, greedies[unified], salt=r + 1))
    finally:
        for unified, b in backends.items():
            b.free_sampler(greedies[unified])
            b.close()
    steps = math.ceil(args.prompt / args.chunk)
    tokens = steps * args.width + args.prompt
    decode_tokens = steps * args.width
    rates = {
        way: [(decode_tokens if way.startswith("decode_only") else tokens) / s for s in values]
        for way, values in samples.items()
    }
    summary = {
        "tokens_per_run": tokens,
        "tokens_per_s": {way: spread(values) for way, values in rates.items()},
        "fused_over_chunked": paired_ratios(rates["fused_unified"], rates["own_passes_chunked"]),
        "whole_over_chunked": paired_ratios(rates["own_passes_whole"], rates["own_passes_chunked"]),
        "decode_only_unified_over_own": paired_ratios(rates["decode_only_unified"], rates["decode_only_own"]),
    }
    config = {k: (v.name if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "out"}
    config["model"] = model.name
    recording.write(args.out, config=config, samples={"seconds": samples}, summary=summary, hide=[model])
    print(summary)


if __name__ == "__main__":
    main()
