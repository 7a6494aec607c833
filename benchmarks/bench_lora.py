"""What do LoRA adapters cost the batching engine when requests with different adapters run
together? llama.cpp applies adapters to a whole forward pass, so a step computes the requests of
one adapter and the adapters take turns (`engines/scheduler.py`): with two adapters among the
running requests, each request gets a token every other step.

The embedded model on `llama_cpp_batched` with two random adapters (`scripts/make_lora.py`),
`--streams` concurrent greedy generations of `--max-tokens` tokens each, in three modes per round,
the order rotating: `base` (no adapter), `one` (all with adapter a), `two` (half a, half b).
Reports total output tokens/s per mode and the paired ratios two/one and one/base.

    .venv/bin/python benchmarks/bench_lora.py --rounds 3 --streams 4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from llmflow import LLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, alternated, paired_ratios, spread

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
MODES = ("base", "one", "two")


def adapters_for(mode: str, streams: int) -> list[str | None]:
    if mode == "base":
        return [None] * streams
    if mode == "one":
        return ["a"] * streams
    return ["a" if i % 2 == 0 else "b" for i in range(streams)]


def run_round(llm: LLM, mode: str, streams: int, max_tokens: int) -> dict[str, float]:
    """All streams at once; total output tokens over the wall time of the slowest."""
    params = {"temperature": 0.0, "max_tokens": max_tokens}

    def one(adapter: str | None) -> int:
        return llm.generate(PROMPT, {**params, "lora": adapter}).usage.completion_tokens

    steps_before = llm.engine.stats().steps
    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        tokens = sum(pool.map(one, adapters_for(mode, streams)))
    took = time.perf_counter() - start
    return {
        "tokens": tokens,
        "seconds": took,
        "tok_s": tokens / took,
        "steps": llm.engine.stats().steps - steps_before,
    }


def make_adapters(where: Path) -> dict[str, str]:
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_lora.py"
    made = {}
    for name, seed in (("a", "1"), ("b", "2")):
        out = where / f"{name}.gguf"
        subprocess.run(
            [sys.executable, str(script), str(out), "--seed", seed], check=True, capture_output=True
        )
        made[name] = str(out)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lora.json"))
    args = parser.parse_args()
    recording = Recording.begin("lora")
    with tempfile.TemporaryDirectory() as tmp:
        config, samples, summary = _measure(args, make_adapters(Path(tmp)))
    recording.write(args.out, config=config, samples=samples, summary=summary)


def _measure(args: argparse.Namespace, adapters: dict[str, str]) -> tuple[dict, dict, dict[str, Any]]:
    options = {"lora": adapters, "prompt_cache": False}  # every round computes its prompts
    llm = LLM.load(engine="llama_cpp_batched", parallel=args.streams, engine_options=options)
    for mode in MODES:  # warm-up
        run_round(llm, mode, args.streams, 8)
    sides = {mode: partial(run_round, llm, mode, args.streams, args.max_tokens) for mode in MODES}
    results = alternated(sides, args.rounds, warm_up=False)
    llm.close()

    def rates(mode: str) -> list[float]:
        return [r["tok_s"] for r in results[mode]]

    config = {"model": llm.model_name, "engine": "llama_cpp_batched", "streams": args.streams,
              "max_tokens": args.max_tokens, "rounds": args.rounds, "prompt": PROMPT}  # fmt: skip
    summary: dict[str, Any] = {f"{mode}_tok_s": spread(rates(mode)) for mode in MODES}
    summary["tok_s_ratio_two_one"] = paired_ratios(rates("two"), rates("one"))
    summary["tok_s_ratio_one_base"] = paired_ratios(rates("one"), rates("base"))
    return config, {"samples": results}, summary


if __name__ == "__main__":
    main()
