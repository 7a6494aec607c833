"""Flash attention on the CPU, on and off, for both llama.cpp engines, one stream in process.

`llama-server`'s default (`--flash-attn auto`) turns flash attention on on the CPU; this measures
what it does for llmflow's own engines before their default follows. Each engine is loaded twice
(flash attention on and off) in this process; runs alternate, every answer runs to `max_tokens`
(`ignore_eos`), and each starts from an empty cache, so both sides decode the same positions.

    .venv/bin/python -m benchmarks.bench_flash_attn --runs 9 --max-tokens 256
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.record import Recording, paired_ratios, spread
from benchmarks.stream_timing import time_stream
from llmflow import LLM

ENGINES = ("llama_cpp", "llama_cpp_batched")
#: a prompt of a few hundred tokens, so that the first token also measures prompt processing
PROMPT = " ".join(["Once upon a time, in a small village by the sea, there lived an old fisherman who"] * 16)


def one_stream(llm: LLM, max_tokens: int, run: int) -> tuple[float, float, int]:
    """`time_stream` of one greedy answer. The prompt starts with the run's number, so no engine
    finds it cached from an earlier run."""
    params = {"temperature": 0.0, "max_tokens": max_tokens}
    return time_stream(lambda: llm.stream(f"Story {run}. {PROMPT}", params, raw=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/flash_attn.json"))
    args = parser.parse_args()
    recording = Recording.begin("flash_attn")

    common = {"ignore_eos": True, "n_ctx": 2048}
    llms = {
        (engine, fa): LLM.load(engine=engine, engine_options={**common, "flash_attn": fa})
        for engine in ENGINES
        for fa in (True, False)
    }
    for llm in llms.values():
        one_stream(llm, 16, -1)  # warm-up
    results: dict[tuple[str, bool], list[tuple[float, float, int]]] = {key: [] for key in llms}
    for i in range(args.runs):
        for engine in ENGINES:
            order = [True, False] if i % 2 == 0 else [False, True]
            for fa in order:
                results[(engine, fa)].append(one_stream(llms[(engine, fa)], args.max_tokens, i))
        print(f"run {i + 1}/{args.runs}", flush=True)

    summary = {}
    for engine in ENGINES:
        on, off = results[(engine, True)], results[(engine, False)]
        summary[engine] = {
            "on_tokens_per_s": spread(r[1] for r in on),
            "off_tokens_per_s": spread(r[1] for r in off),
            "on_ttft_ms": spread(r[0] * 1000 for r in on),
            "off_ttft_ms": spread(r[0] * 1000 for r in off),
            "tokens_per_s_ratio_on_off": paired_ratios([r[1] for r in on], [r[1] for r in off]),
            "ttft_ratio_on_off": paired_ratios([r[0] for r in on], [r[0] for r in off]),
        }
    first = llms[(ENGINES[0], True)]
    config = {
        "model": first.model_name,
        "threads": first.engine.options.n_threads,
        "max_tokens": args.max_tokens,
        "prompt_tokens": len(first.engine.tokenize(PROMPT)),
        "runs": args.runs,
    }
    samples = {
        f"{engine} {'on' if fa else 'off'}": [
            {"ttft_s": r[0], "decode_tok_s": r[1], "tokens": r[2]} for r in rs
        ]
        for (engine, fa), rs in results.items()
    }
    recording.write(args.out, config=config, samples=samples, summary=summary)
    for engine in ENGINES:
        s = summary[engine]
        print(f"{engine}: on/off tok/s {s['tokens_per_s_ratio_on_off']}, TTFT {s['ttft_ratio_on_off']}")


if __name__ == "__main__":
    main()
