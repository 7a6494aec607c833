"""Single-stream decode through llmflow's ExLlamaV2 engine against ExLlamaV2's own streaming
generator (the seed's path: `begin_stream_ex` / `stream_ex`), on the same model, cache and GPU.

Models are Llama-shaped with random FP16 weights and the embedded SmolLM2 tokenizer, built on the
GPU in seconds (`tests/models/random_llama.py`): 1b is Llama 3.2 1B's shape (2.5 GB), 8b Llama 3
8B's (16.1 GB: 299 tok/s at the H200's 4.8 TB/s if every token reads every weight once). Sampling
is the seed's (temperature 1, top_k 50, top_p 0.8, repetition penalty 1.05) on both sides; every
run starts from an empty cache; runs alternate; medians are reported.

    PYTHONPATH=. python benchmarks/bench_exllamav2_gpu.py --shapes 1b,8b --cache-types fp16,q4
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.stream_timing import time_stream
from llmflow import LLM, SamplingParams
from llmflow.engines.exllamav2 import sampler_settings
from tests.models import smollm2_tokenizer_dir
from tests.models.random_llama import SHAPES, write_random_llama

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
HBM_BYTES_PER_S = 4.8e12  # H200 datasheet
SEED_PARAMS = {"temperature": 1.0, "top_k": 50, "top_p": 0.8, "min_p": 0.0, "repetition_penalty": 1.05}

Run = tuple[float, float, int]  # TTFT s, decode tokens/s, tokens


def run_llmflow(llm: LLM, params: SamplingParams) -> Run:
    llm.engine.clear_cache()
    return time_stream(lambda: llm.stream(PROMPT, params, raw=True))


def run_raw(llm: LLM, params: SamplingParams) -> Run:
    """The seed's loop: one `stream_ex` call per token, no stop conditions (as many tokens as llmflow)."""
    from exllamav2.generator import ExLlamaV2Sampler, ExLlamaV2StreamingGenerator

    engine = llm.engine
    engine.clear_cache()
    generator = ExLlamaV2StreamingGenerator(engine.model, engine.cache, engine.tokenizer)
    generator.set_stop_conditions([])
    settings = sampler_settings(ExLlamaV2Sampler.Settings, params)
    random.seed(params.seed)
    start = time.perf_counter()
    ids = engine.tokenizer.encode(PROMPT, encode_special_tokens=True)
    generator.begin_stream_ex(ids, settings)
    first = None
    tokens = 0
    for _ in range(params.max_tokens):
        result = generator.stream_ex()
        tokens += 1
        if first is None and result["chunk"]:
            first = time.perf_counter()
        if result["eos"]:
            break
    end = time.perf_counter()
    engine.clear_cache()  # the generator moved the shared cache
    return first - start, (tokens - 1) / (end - first), tokens


def measure(llm: LLM, params: SamplingParams, runs: int) -> dict:
    paths: dict[str, Callable[[LLM, SamplingParams], Run]] = {"llmflow": run_llmflow, "raw": run_raw}
    for fn in paths.values():
        # Warm-up over the full length: the first pass through each sequence length is slower
        # (per-shape setup below ExLlamaV2), and whichever path ran first would pay for it.
        fn(llm, params)
    results: dict[str, list[Run]] = {name: [] for name in paths}
    for i in range(runs):
        order = list(paths.items())
        if i % 2:
            order.reverse()
        for name, fn in order:
            results[name].append(fn(llm, params))

    def med(name: str, index: int) -> float:
        return statistics.median(r[index] for r in results[name])

    summary = {
        "tokens": {name: [r[2] for r in rs] for name, rs in results.items()},
        "llmflow_tokens_per_s_runs": [round(r[1], 2) for r in results["llmflow"]],
        "raw_tokens_per_s_runs": [round(r[1], 2) for r in results["raw"]],
        "llmflow_tokens_per_s": med("llmflow", 1),
        "raw_tokens_per_s": med("raw", 1),
        "llmflow_ttft_ms": med("llmflow", 0) * 1000,
        "raw_ttft_ms": med("raw", 0) * 1000,
    }
    summary["tokens_per_s_ratio"] = summary["llmflow_tokens_per_s"] / summary["raw_tokens_per_s"]
    summary["ttft_delta_ms"] = summary["llmflow_ttft_ms"] - summary["raw_ttft_ms"]
    return summary


def model_root(requested: Path | None, needed_bytes: int) -> Path:
    """Where random models go: RAM-backed /dev/shm when it has room (fast to write and to load)."""
    if requested is not None:
        return requested
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 1.5 * needed_bytes:
        return Path(tempfile.mkdtemp(prefix="llmflow-models-", dir=shm))
    return Path(tempfile.mkdtemp(prefix="llmflow-models-"))


def bench_shape(shape_name: str, root: Path, args: argparse.Namespace) -> list[dict]:
    shape = SHAPES[shape_name]
    directory = root / f"random-llama-{shape_name}"
    started = time.perf_counter()
    if not (directory / "config.json").is_file():
        write_random_llama(directory, shape, smollm2_tokenizer_dir(), device=args.device)
    build_s = time.perf_counter() - started
    params = SamplingParams(**SEED_PARAMS, max_tokens=args.max_tokens, seed=1234)
    rows = []
    for cache_type in args.cache_types.split(","):
        started = time.perf_counter()
        llm = LLM.load(directory, engine="exllamav2", engine_options={"cache_type": cache_type})
        load_s = time.perf_counter() - started
        try:
            row = {
                "shape": shape_name,
                "parameters": shape.parameters(),
                "weight_bytes": shape.parameters() * 2,
                "cache_type": cache_type,
                "build_s": round(build_s, 1),
                "load_s": round(load_s, 1),
                **measure(llm, params, args.runs),
            }
        finally:
            llm.close()
        row["hbm_roofline_tokens_per_s"] = HBM_BYTES_PER_S / row["weight_bytes"]
        row["llmflow_fraction_of_roofline"] = row["llmflow_tokens_per_s"] / row["hbm_roofline_tokens_per_s"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.delete_models:
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def machine() -> dict:
    import exllamav2
    import torch

    return {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "exllamav2": exllamav2.__version__,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1b,8b", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--cache-types", default="fp16", help="comma-separated, of fp16, q8, q6, q4")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--device", default="cuda", help="where random weights are generated")
    parser.add_argument("--model-root", type=Path, default=None, help="default: /dev/shm or a temp dir")
    parser.add_argument("--delete-models", action="store_true", help="remove each model after its runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/exllamav2_gpu.json"))
    args = parser.parse_args()

    shapes = args.shapes.split(",")
    root = model_root(args.model_root, max(SHAPES[s].parameters() * 2 for s in shapes))
    rows = []
    for shape_name in shapes:
        rows.extend(bench_shape(shape_name, root, args))
    summary = {
        "prompt": PROMPT,
        "sampling": SEED_PARAMS,
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "machine": machine(),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'shape':>5} {'cache':>5} {'llmflow tok/s':>14} {'raw tok/s':>10} {'ratio':>6} {'TTFT ms':>15}")
    for r in rows:
        print(
            f"{r['shape']:>5} {r['cache_type']:>5} {r['llmflow_tokens_per_s']:>14.1f} "
            f"{r['raw_tokens_per_s']:>10.1f} {r['tokens_per_s_ratio']:>6.3f} "
            f"{r['llmflow_ttft_ms']:>7.1f}/{r['raw_ttft_ms']:<7.1f}"
        )


if __name__ == "__main__":
    main()
