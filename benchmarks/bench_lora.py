"""What do LoRA adapters cost the batching engine when requests with different adapters run
together? llama.cpp applies an adapter to a whole forward pass, so adapters take turns
(`engines/scheduler.py`): with two among the running requests, each gets a token every other step.

`--streams` greedy generations at once on `llama_cpp_batched` with two random adapters
(`scripts/make_lora.py`), per round in three modes, rotating: `base` (no adapter), `one` (all on
a), `two` (half a, half b); output tokens/s, and the ratios two/one and one/base round by round.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.record import REPO, Recording, alternated, paired_ratios, spread
from benchmarks.suite import parser
from llmflow import LLM

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
#: each mode's adapter per stream, by the stream's parity
MODES = {"base": (None, None), "one": ("a", "a"), "two": ("a", "b")}


def run_round(llm: LLM, mode: str, streams: int, max_tokens: int) -> dict[str, float]:
    """All streams at once; total output tokens over the wall time of the slowest."""

    def one(i: int) -> int:
        params = {"temperature": 0.0, "max_tokens": max_tokens, "lora": MODES[mode][i % 2]}
        return llm.generate(PROMPT, params).usage.completion_tokens

    steps_before = llm.engine.stats().steps
    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        tokens = sum(pool.map(one, range(streams)))
    took, steps = time.perf_counter() - start, llm.engine.stats().steps - steps_before
    return {"tokens": tokens, "seconds": took, "tok_s": tokens / took, "steps": steps}


def make_adapters(where: Path) -> dict[str, str]:
    """Two random adapters (`scripts/make_lora.py`), `a` and `b`."""
    made = {}
    for name, seed in (("a", "1"), ("b", "2")):
        made[name] = str(where / f"{name}.gguf")
        command = [sys.executable, str(REPO / "scripts" / "make_lora.py"), made[name], "--seed", seed]
        subprocess.run(command, check=True, capture_output=True)
    return made


def main() -> None:
    args = parser(__doc__, "benchmarks/results/lora.json", rounds=3, streams=4, max_tokens=64).parse_args()
    recording = Recording.begin("lora")
    with tempfile.TemporaryDirectory() as tmp:
        # no prompt cache: every round computes its prompts
        options = {"lora": make_adapters(Path(tmp)), "prompt_cache": False}
        llm = LLM.load(engine="llama_cpp_batched", parallel=args.streams, engine_options=options)
        for mode in MODES:  # warm-up
            run_round(llm, mode, args.streams, 8)
        sides = {mode: partial(run_round, llm, mode, args.streams, args.max_tokens) for mode in MODES}
        results = alternated(sides, args.rounds, warm_up=False)
        llm.close()
    rates = {mode: [r["tok_s"] for r in results[mode]] for mode in MODES}
    config = {"model": llm.model_name, "engine": "llama_cpp_batched", "streams": args.streams,
              "max_tokens": args.max_tokens, "rounds": args.rounds, "prompt": PROMPT}  # fmt: skip
    summary: dict[str, Any] = {f"{mode}_tok_s": spread(rates[mode]) for mode in MODES}
    summary["tok_s_ratio_two_one"] = paired_ratios(rates["two"], rates["one"])
    summary["tok_s_ratio_one_base"] = paired_ratios(rates["one"], rates["base"])
    recording.write(args.out, config=config, samples={"samples": results}, summary=summary)


if __name__ == "__main__":
    main()
