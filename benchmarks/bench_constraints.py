"""What an output constraint costs: decode tokens/s with a JSON Schema against the same prompt
unconstrained, on `llama_cpp` (one stream) and `llama_cpp_batched` (8 streams at once), beside
llama.cpp's own GBNF grammar sampler on the same model; and schema compile time, cold and cached.

The schema wants at least 50 strings and both engines ignore EOS, so every side decodes the same
positions. One stream runs greedy and again sampled: a greedy step computes the whole mask only
when the top token is refused, a sampled step always does. Sides alternate in a rotating order.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from typing import Any

from benchmarks.record import Recording, alternated, paired_ratios, spread
from benchmarks.stream_timing import at_once, decode_speed
from benchmarks.suite import parser
from llmflow import LLM
from llmflow.constraints import Constraint
from llmflow.constraints.compiler import ConstraintCompiler, lltokenizer

PROMPT = "List as many fruits and vegetables as you can, as a JSON array of strings."
SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 50}
ADDRESS = {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}  # fmt: skip
PROPERTIES = {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
              "email": {"type": "string", "format": "email"}, "address": ADDRESS,
              "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}}  # fmt: skip
OBJECT = {"type": "object", "properties": PROPERTIES, "required": ["name", "age"]}
COMPILE_SCHEMAS = {"array_of_strings": SCHEMA, "object": OBJECT}
STREAMS = 8
#: every side's decode tokens/s and tokens, round by round
Series = tuple[dict[str, list[float]], dict[str, list[int]]]


def decode_rate(llm: LLM, params: dict[str, Any], constraint: Constraint | None) -> tuple[float, int]:
    """(decode tokens/s from the first token to the last, tokens) of one stream."""
    return decode_speed(llm.stream(PROMPT, params, constraint=constraint))[:2]


def gbnf_rate(llm: LLM, max_tokens: int, grammar: Any) -> tuple[float, int]:
    """llama-cpp-python's own GBNF sampler on the same model object (the `llama_cpp` engine's)."""
    llama = llm.engine.llama
    llama.reset()
    ids = llm.prepare(PROMPT, {"max_tokens": max_tokens}).prompt_ids
    first, tokens = None, 0
    for token in llama.generate(ids, temp=0.0, grammar=grammar):
        tokens += 1
        first = first or time.perf_counter()
        if token in llm.engine.eos_token_ids or tokens >= max_tokens:
            break
    return ((tokens - 1) / (time.perf_counter() - first) if first else 0.0), tokens


def batched_rate(llm: LLM, params: dict[str, Any], constraint: Constraint | None) -> tuple[float, int]:
    """(output tokens/s of STREAMS concurrent streams, total tokens): all tokens over the wall time."""
    wall, done = at_once(
        STREAMS, lambda i: llm.generate(PROMPT, {**params, "seed": i}, constraint=constraint)
    )
    tokens = sum(d.usage.completion_tokens for d in done)
    return tokens / wall, tokens


def compile_times(llm: LLM, repeats: int) -> dict[str, Any]:
    vocabulary = llm.engine.token_vocabulary()
    start = time.perf_counter()
    tokenizer = lltokenizer(vocabulary)
    tokenizer_ms = (time.perf_counter() - start) * 1e3
    out: dict[str, Any] = {"tokenizer_build_ms": tokenizer_ms}
    for name, schema in COMPILE_SCHEMAS.items():
        cold, cached = [], []
        for _ in range(repeats):
            fresh = ConstraintCompiler(vocabulary, tokenizer=tokenizer)  # built once per model
            start = time.perf_counter()
            fresh.compile(Constraint.json_schema(schema))
            cold.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            fresh.compile(Constraint.json_schema(schema))
            cached.append((time.perf_counter() - start) * 1e3)
        out[name] = {"cold_ms": cold, "cached_ms": cached}
    return out


def measure_single(args: argparse.Namespace) -> Series:
    from llama_cpp import LlamaGrammar

    llm = LLM.load(engine="llama_cpp", engine_options={"ignore_eos": True})
    grammar = LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
    params = {"max_tokens": args.max_tokens, "temperature": 0.0}
    sampled = {"max_tokens": args.max_tokens, "temperature": 0.8, "seed": 1}
    constraint = Constraint.json_schema(SCHEMA)
    return measure(llm, args.rounds, {
        "unconstrained": lambda: decode_rate(llm, params, None),
        "constrained": lambda: decode_rate(llm, params, constraint),
        "gbnf": lambda: gbnf_rate(llm, args.max_tokens, grammar),
        "unconstrained_sampled": lambda: decode_rate(llm, sampled, None),
        "constrained_sampled": lambda: decode_rate(llm, sampled, constraint),
    })  # fmt: skip


def measure_batched(args: argparse.Namespace) -> Series:
    options = {"n_ctx": 1024, "parallel": STREAMS, "ignore_eos": True}
    llm = LLM.load(engine="llama_cpp_batched", engine_options=options)
    params = {"max_tokens": args.max_tokens, "temperature": 0.8}
    sides = {"unconstrained": None, "constrained": Constraint.json_schema(SCHEMA)}
    return measure(llm, args.rounds, {s: partial(batched_rate, llm, params, c) for s, c in sides.items()})


def measure(llm: LLM, rounds: int, sides: dict[str, Any]) -> Series:
    """Every side's (decode tokens/s, tokens) round by round, the sides alternated; then `llm` closes."""
    results = alternated(sides, rounds)
    llm.close()
    rates = {name: [r[0] for r in runs] for name, runs in results.items()}
    return rates, {name: [r[1] for r in runs] for name, runs in results.items()}


def main() -> None:
    args = parser(__doc__, "benchmarks/results/constraints.json", rounds=5, max_tokens=128).parse_args()
    recording = Recording.begin("constraints")
    single, single_tokens = measure_single(args)
    batched, batched_tokens = measure_batched(args)
    llm = LLM.load(engine="llama_cpp")
    compiles = compile_times(llm, max(3, args.rounds))
    llm.close()
    over = {
        "llama_cpp_constrained_over_unconstrained": ("constrained", "unconstrained"),
        "llama_cpp_gbnf_over_unconstrained": ("gbnf", "unconstrained"),
        "llama_cpp_sampled_constrained_over_unconstrained": ("constrained_sampled", "unconstrained_sampled"),
    }
    summary = {
        "llama_cpp": {name: spread(values) for name, values in single.items()},
        **{key: paired_ratios(single[a], single[b]) for key, (a, b) in over.items()},
        "llama_cpp_batched_8": {name: spread(values) for name, values in batched.items()},
        "llama_cpp_batched_8_constrained_over_unconstrained": paired_ratios(
            batched["constrained"], batched["unconstrained"]),
        "tokenizer_build_ms": compiles["tokenizer_build_ms"],
        "compile": {name: {"cold_ms": spread(v["cold_ms"]), "cached_ms": spread(v["cached_ms"])}
                    for name, v in compiles.items() if name != "tokenizer_build_ms"},
    }  # fmt: skip
    config = {"model": "SmolLM2-135M-Instruct Q4_1", "rounds": args.rounds, "max_tokens": args.max_tokens,
              "streams": STREAMS, "schema": SCHEMA, "prompt": PROMPT}  # fmt: skip
    samples = {"llama_cpp": single, "llama_cpp_tokens": single_tokens, "llama_cpp_batched_8": batched,
               "llama_cpp_batched_8_tokens": batched_tokens, "compile": compiles}  # fmt: skip
    recording.write(args.out, config=config, samples=samples, summary=summary)


if __name__ == "__main__":
    main()
