"""Continuous batching on llama.cpp, per weight type: 8 streams against 1 on the batching engine.

The embedded model (Q4_1) and its Q4_0 and Q8_0 requantizations (made once with llama.cpp's own
quantizer: Q4_1's precision, but llama.cpp's Q4_0 / Q8_0 kernels, which it repacks for AVX2/AVX512),
each at every `--concurrency` in process (`llmflow bench`'s closed loop); weight types and levels
alternate from round to round, and the 8-over-1 ratio is taken round by round.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path
from typing import Any

from benchmarks.peers.build_llama_server import DEFAULT_CACHE
from benchmarks.record import Recording, paired_ratios, rotated, spread
from benchmarks.suite import parser
from llmflow.bench import BenchOptions, run_bench
from llmflow.bench.driver import parse_list
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path

#: llama.cpp's file types (`LLAMA_FTYPE_MOSTLY_*`) this benchmark requantizes to
FTYPES = {"Q4_0": 2, "Q8_0": 7}
MODELS = DEFAULT_CACHE / "models"


def main() -> None:
    p = parser(__doc__, "benchmarks/results/batching.json", prompt_tokens=128, max_tokens=128, n_ctx=1024,
               rounds=5, seed=0)  # fmt: skip
    p.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    p.add_argument("--threads", type=int, default=usable_cores())
    p.add_argument("--concurrency", default="1,8", help="streams on the batching engine")
    p.add_argument("--requests", type=int, default=None, help="per level; default: 4 per stream, >= 8")
    args = p.parse_args()
    recording = Recording.begin("batching")
    source = (args.model or default_model_path()).resolve()
    models = {"Q4_1": source} | {quant: requantized(source, quant) for quant in FTYPES}
    levels = parse_list(args.concurrency, int, "concurrency")
    samples: dict[str, dict[str, list[Any]]] = {quant: {"engine": []} for quant in models}
    for r in range(args.rounds):
        for quant in rotated(list(models), r):
            print(f"round {r + 1}/{args.rounds} · {quant}", file=sys.stderr)
            order = levels if r % 2 == 0 else levels[::-1]
            samples[quant]["engine"].append(in_process(models[quant], order, args))
    config = {"model": source.name, "quants": list(models), "requantized_from": source.name,
              "threads": args.threads, "concurrency": list(levels), "parallel": max(levels),
              "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens, "n_ctx": args.n_ctx,
              "rounds": args.rounds}  # fmt: skip
    summary = {quant: summarize(by_quant, levels) for quant, by_quant in samples.items()}
    hide = [str(m) for m in models.values()] + [str(MODELS)]
    recording.write(args.out, config=config, samples=samples, summary=summary, hide=hide)


def requantized(source: Path, quant: str) -> Path:
    """`source` requantized to `quant` with llama.cpp's own quantizer, made once into `MODELS`."""
    import llama_cpp

    target = MODELS / f"{source.stem}.requantized-{quant}.gguf"
    if target.is_file():
        return target
    MODELS.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.allow_requantize = True
    partial = target.with_suffix(".partial")
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params))
    if status != 0:
        raise SystemExit(f"llama_model_quantize to {quant} failed ({status})")
    partial.rename(target)
    return target


def in_process(model: Path, levels: tuple[int, ...], args: argparse.Namespace) -> dict:
    """One `llmflow bench` sweep over every level on the engine in this process: with several
    streams at the top level, the batching engine, as `llmflow serve` loads it."""
    options = {"n_threads": args.threads, "n_ctx": args.n_ctx, "parallel": max(levels)}
    return run_bench(BenchOptions(model=str(model), concurrency=levels, requests=args.requests,
                                  prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                                  seed=args.seed, engine_options=options))  # fmt: skip


def summarize(samples: dict[str, list[Any]], levels: tuple[int, ...]) -> dict[str, Any]:
    """Medians with min-max over rounds; the 8-over-1 ratios round by round."""

    def engine(concurrency: int, key: str, stat: str | None = None) -> list[float | None]:
        values = []
        for document in samples["engine"]:
            summary = next((x["summary"] for x in document["levels"] if x["concurrency"] == concurrency), {})
            value = summary.get(key)
            values.append(value.get(stat) if stat and value else value)
        return values

    result: dict[str, Any] = {"engine": {c: {
        "output_tok_s": spread(engine(c, "output_throughput")),
        "ttft_p50_s": spread(engine(c, "ttft_s", "median")),
        "itl_p50_s": spread(engine(c, "itl_s", "median")),
        "failed": sum(v or 0 for v in engine(c, "failed")),
    } for c in levels}}  # fmt: skip
    if 1 in levels and 8 in levels:
        rates = {c: engine(c, "output_throughput") for c in (1, 8)}
        result["engine_8_over_1"] = paired_ratios(rates[8], rates[1])
    return result


if __name__ == "__main__":
    main()
