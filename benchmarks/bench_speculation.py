"""What prompt-lookup speculation buys: decode tokens/s with it on and off (the per-request
`speculative` flag, one loaded engine), greedy, on "rewrite this text changing one word" requests
(an answer that copies most of its ~600-token prompt) and on ordinary chat prompts with
`llama_cpp` (one stream), and on 8 concurrent rewrite streams with `llama_cpp_batched`. Every
answer with speculation on is compared with the same request's answer with it off.

Both engines load with the q8_0 KV cache: with the f16 cache, llama.cpp's CPU attention computes
a one-token pass past 512 KV cells in another order than a pass of several tokens (its split-KV
path), so a long greedy answer may differ in a near-tie; with q8_0 both compute alike. Rounds
alternate the sides in a rotating order; a stream's decode tokens/s is counted from its first
token to its last, 8 streams' as all their tokens over the wall time.

    python -m benchmarks.bench_speculation --rounds 3 --max-tokens 256
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, paired_ratios, spread
from stream_timing import at_once, decode_speed

from llmflow import LLM

#: the ~600-token text the rewrite requests copy
TEXT = (Path(__file__).parent / "rewrite_text.txt").read_text(encoding="utf-8")
REWRITES = [("river", "stream"), ("bridge", "viaduct"), ("baker", "grocer"), ("square", "plaza"),
            ("church", "chapel"), ("farmers", "growers"), ("town", "village"),
            ("fishermen", "anglers")]  # fmt: skip
CHATS = ["What are three good habits for staying healthy?", "Explain how a bicycle works to a ten-year-old.",
         "Write a short poem about autumn.", "Give me some tips for learning a new language.",
         "Why is the sky blue?", "Suggest a name for a small bakery and explain it."]  # fmt: skip
STREAMS = 8
ENGINE_OPTIONS: dict[str, Any] = {"n_ctx": 2048, "kv_cache_type": "q8_0", "speculative": True}


def rewrite_prompt(i: int) -> str:
    old, new = REWRITES[i % len(REWRITES)]
    return f"Rewrite the following text, changing the word '{old}' to '{new}' everywhere. Keep everything else exactly the same.\n\n{TEXT}"  # noqa: E501


def one_stream(llm: LLM, prompt: str, params: dict[str, Any]) -> tuple[float, int, str]:
    return decode_speed(llm.stream(prompt, params))


def many_streams(llm: LLM, params: dict[str, Any]) -> tuple[float, int, list[str]]:
    """(all tokens over the wall time, tokens, texts) of STREAMS concurrent rewrite streams."""
    wall, done = at_once(STREAMS, lambda i: llm.generate(rewrite_prompt(i), params))
    tokens = sum(d.usage.completion_tokens for d in done)
    return tokens / wall, tokens, [d.text for d in done]


class Sides:
    """Both sides of one workload, run alternately; keeps rates, token counts, the draft tokens
    verified and confirmed with speculation on (the engine's counts: whether its planner drafted at
    all) and whether each answer with speculation on equals the same request's answer with it off."""

    def __init__(self, run: Any, llm: LLM):
        self.run = run
        self.counts = llm.engine.speculation_stats()
        self.drafted = {"proposed": 0, "accepted": 0}
        self.rates: dict[str, list[float]] = {"off": [], "on": []}
        self.tokens: dict[str, list[int]] = {"off": [], "on": []}
        self.answers: dict[str, dict[int, Any]] = {"off": {}, "on": {}}

    def round(self, i: int, first: str) -> None:
        for side in (first, "off" if first == "on" else "on"):
            before = (self.counts.proposed, self.counts.accepted)
            rate, tokens, text = self.run(i, side == "on")
            self.drafted["proposed"] += self.counts.proposed - before[0]
            self.drafted["accepted"] += self.counts.accepted - before[1]
            self.rates[side].append(rate)
            self.tokens[side].append(tokens)
            self.answers[side][i] = text
            print(f"round {i} {side}: {rate:.1f} tok/s, {tokens} tokens", flush=True)

    def identical(self) -> tuple[int, int]:
        pairs = [(self.answers["on"][i], self.answers["off"][i]) for i in self.answers["on"]]
        same = sum(a == b for a, b in pairs)
        return same, len(pairs)


def measure(args: argparse.Namespace) -> dict[str, Sides]:
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens}
    if args.threads:
        ENGINE_OPTIONS["n_threads"] = args.threads
    single = LLM.load(args.model, engine="llama_cpp", engine_options=ENGINE_OPTIONS)
    workloads = {
        "rewrite": Sides(
            lambda i, on: one_stream(single, rewrite_prompt(i), {**greedy, "speculative": on}), single
        ),
        "chat": Sides(
            lambda i, on: one_stream(single, CHATS[i % len(CHATS)], {**greedy, "speculative": on}), single
        ),
    }
    for sides in workloads.values():  # warm-up: thread teams, the prompt's cells
        sides.run(0, False)
    for i in range(args.rounds):
        for sides in workloads.values():
            sides.round(i, "on" if i % 2 else "off")
    single.close()
    batched = LLM.load(
        args.model, engine="llama_cpp_batched", engine_options={**ENGINE_OPTIONS, "parallel": STREAMS}
    )
    many = Sides(lambda i, on: _joined(many_streams(batched, {**greedy, "speculative": on})), batched)
    many.run(0, False)
    for i in range(args.rounds):
        many.round(i, "on" if i % 2 else "off")
    batched.close()
    workloads["batched_8"] = many
    return workloads


def _joined(result: tuple[float, int, list[str]]) -> tuple[float, int, str]:
    rate, tokens, texts = result
    return rate, tokens, "\x00".join(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/speculation.json"))
    parser.add_argument("--model", type=Path, help="a GGUF of the embedded model (default: its package's)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: every usable core)")
    parser.add_argument(
        "--note", action="append", default=[], help="a line for the result (how busy the machine was)"
    )
    args = parser.parse_args()
    recording = Recording.begin("speculation")
    recording.notes.extend(args.note)
    workloads = measure(args)
    summary: dict[str, Any] = {}
    for name, sides in workloads.items():
        same, pairs = sides.identical()
        summary[name] = {
            "off": spread(sides.rates["off"]),
            "on": spread(sides.rates["on"]),
            "on_over_off": paired_ratios(sides.rates["on"], sides.rates["off"]),
            "identical": same,
            "answers": pairs,
            "draft_tokens": sides.drafted,
        }
    config = {"model": "SmolLM2-135M-Instruct Q4_1", "rounds": args.rounds, "max_tokens": args.max_tokens,
              "streams": STREAMS, "engine_options": ENGINE_OPTIONS, "rewrites": REWRITES,
              "chats": CHATS}  # fmt: skip
    samples = {name: {"rates": s.rates, "tokens": s.tokens} for name, s in workloads.items()}
    recording.write(args.out, config=config, samples=samples, summary=summary)


if __name__ == "__main__":
    main()
