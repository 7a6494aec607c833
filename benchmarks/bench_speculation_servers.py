"""Prompt-lookup speculation served, beside llama.cpp's own n-gram speculation in `llama-server` on
the same GGUF: single-stream decode tokens/s with it on and off, greedy, on the "rewrite this text
changing one word" requests of `bench_speculation` (answers that copy most of a ~600-token prompt).

Sides: `llmflow on` and `llmflow off` (one server, the request's `speculative` flag), `llama-server
off` and one `llama-server TYPE` per `--spec-type` (its own process: llama-server reads speculation
from its command line only). Each round sends every prompt to every side, the order rotating; a
side's round is the median over its prompts, and its answers are compared with its own server's
without speculation.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.bench_speculation import REWRITES, rewrite_prompt
from benchmarks.peers.build_llama_server import ensure_llama_server
from benchmarks.peers.compare_servers import Setup, add_peer_arguments, llama_server_command
from benchmarks.record import Recording, config_of, paired_ratios, rotated, spread
from benchmarks.serve_process import free_port, llmflow_serve, model_id, started, stream_chat
from benchmarks.suite import parser
from llmflow.engines.speculation import DRAFT_MAX
from llmflow.model_files import default_model_path

OFF = "off"


def decode_rate(answer: dict[str, Any]) -> float | None:
    """Decode tokens/s from the first content to the last (None for an answer of one token)."""
    tokens = (answer["usage"] or {}).get("completion_tokens") or 0
    span = (answer["last_s"] or 0) - (answer["ttft_s"] or 0)
    return (tokens - 1) / span if tokens > 1 and span > 0 else None


def servers(args: argparse.Namespace, model: Path) -> dict[str, Callable[[int], list[str]]]:
    """Each server's command for a port, by name: `llmflow`, `llama-server off`, then
    `llama-server TYPE` for each `--spec-type`."""
    more = shlex.split(args.llama_server_args)

    def llmflow(port: int) -> list[str]:
        options = {"n_ctx": args.n_ctx, "n_threads": args.threads, "draft_max": args.draft_max}
        return llmflow_serve(port, "--engine", "llama_cpp", model=model, speculative="true", **options)

    def llama_server(spec: list[str]) -> Callable[[int], list[str]]:
        setup = Setup(model, args.threads, 1, args.n_ctx, args.llama_server, None, Path(), (*more, *spec))
        return lambda port: llama_server_command(setup, port)

    commands = {"llmflow": llmflow, f"llama-server {OFF}": llama_server([])}
    for kind in args.spec_type:
        # each n-gram type drafts as long as its own defaults say (ngram-simple 48, ngram-mod 64)
        commands[f"llama-server {kind}"] = llama_server(["--spec-type", kind])
    return commands


def sides(urls: dict[str, str]) -> dict[str, tuple[str, dict[str, Any], str]]:
    """Each side as (its server's URL, more request fields, the side its answers are compared with)."""
    llmflow = urls["llmflow"]
    table = {"llmflow on": (llmflow, {}, "llmflow off"), "llmflow off": (llmflow, {"speculative": False}, "")}
    for name, url in urls.items():
        if name.startswith("llama-server"):
            table[name] = (url, {}, "" if name.endswith(OFF) else f"llama-server {OFF}")
    return table


def one_round(table: dict[str, tuple[str, dict, str]], models: dict[str, str], round_: int,
              args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Every prompt on every side, the sides' order rotating with the round."""
    answers: dict[str, list[dict[str, Any]]] = {name: [] for name in table}
    for name in rotated(list(table), round_):
        url, more, _ = table[name]
        for i in range(len(REWRITES)):
            answer = stream_chat(url, models[url], rewrite_prompt(i), args.max_tokens, **more)
            tokens = (answer["usage"] or {}).get("completion_tokens")
            answers[name].append({"rate": decode_rate(answer), "tokens": tokens, "ttft_s": answer["ttft_s"],
                                  "text": answer["text"]})  # fmt: skip
        rate = statistics.median(a["rate"] or 0 for a in answers[name])
        print(f"round {round_ + 1} {name}: {rate:.1f} tok/s", flush=True)
    return answers


def summarize(rounds: list[dict[str, list[dict[str, Any]]]], table: dict[str, tuple[str, dict, str]]
              ) -> dict[str, Any]:  # fmt: skip
    def median_rate(answers: list[dict[str, Any]]) -> float | None:
        rates = [a["rate"] for a in answers if a["rate"]]
        return statistics.median(rates) if rates else None

    rates = {name: [median_rate(r[name]) for r in rounds] for name in table}
    baselines = {name: baseline for name, (_, _, baseline) in table.items() if baseline}
    identical = {}
    for name, baseline in baselines.items():
        pairs = [(a["text"], b["text"]) for r in rounds for a, b in zip(r[name], r[baseline], strict=True)]
        identical[name] = {"same": sum(a == b for a, b in pairs), "answers": len(pairs)}
    peers = [f"llama-server {OFF}", *(name for name in baselines if name.startswith("llama-server"))]
    ours = rates["llmflow on"]
    return {"decode_tok_s": {name: spread(values) for name, values in rates.items()},
            "on_over_off": {name: paired_ratios(rates[name], rates[b]) for name, b in baselines.items()},
            "identical_to_off": identical,
            "llmflow_on_over_llama_server": {p: paired_ratios(ours, rates[p]) for p in peers}}  # fmt: skip


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, rounds=3, max_tokens=256, n_ctx=2048)
    p.add_argument("--draft-max", type=int, default=DRAFT_MAX, help="llmflow's draft tokens per pass at most")
    p.add_argument("--spec-type", action="append", help="llama-server's (default: ngram-simple, ngram-mod)")
    add_peer_arguments(p)
    args = p.parse_args()
    args.spec_type = args.spec_type or ["ngram-simple", "ngram-mod"]
    return args


def main() -> None:
    args = parse_args()
    recording = Recording.begin("speculation_servers")
    model = args.model or default_model_path()
    args.llama_server = args.llama_server or ensure_llama_server(args.sdist)
    logs = Path(tempfile.mkdtemp(prefix="llmflow-speculation-"))
    with ExitStack() as stack:
        urls = {}
        for name, command in servers(args, model).items():
            port = free_port()
            urls[name] = stack.enter_context(started(name.replace(" ", "-"), command(port), port, logs))
        models = {url: model_id(url) for url in urls.values()}
        table = sides(urls)
        for url, more, _ in table.values():  # warm-up: each server's first prompt, its CUDA graphs or threads
            stream_chat(url, models[url], rewrite_prompt(0), 16, **more)
        rounds = [one_round(table, models, i, args) for i in range(args.rounds)]
    samples = {name: [[{k: a[k] for k in ("rate", "tokens", "ttft_s")} for a in r[name]] for r in rounds]
               for name in table}  # fmt: skip
    config = {**config_of(args), "model": model.name, "sides": list(table), "rewrites": REWRITES}
    hidden = [str(p) for p in (model, logs, args.llama_server)]
    recording.write(args.out, config=config, samples=samples, summary=summarize(rounds, table), hide=hidden)


if __name__ == "__main__":
    main()
