"""llmflow serve against the strongest CPU peers, side by side in one run, measured with `llmflow bench`.

On the same GGUF, threads and prompts: `llmflow` (batching engine), `llama-server` (built from the
pinned sdist's llama.cpp), `example-server` (llama-cpp-python's example batching server) and
`llama_cpp.server` (one request at a time), at closed-loop `--concurrency` levels, Poisson `--rates`
and a shared-prefix chat. The servers' order rotates by workload and round, so drift on a shared
machine lands on all alike; output tokens are re-tokenized (not every server sends usage).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.peers.build_llama_server import ensure_llama_server
from benchmarks.record import Recording, config_of, rotated, spread
from benchmarks.serve_process import free_port, llmflow_serve, started
from benchmarks.suite import parser
from llmflow.bench import BenchOptions, run_bench
from llmflow.bench.driver import parse_list
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path


@dataclass(frozen=True)
class Setup:
    model: Path
    threads: int
    parallel: int
    n_ctx: int  # per sequence
    llama_server: Path | None
    example_server: Path | None
    logs: Path
    #: more llama-server options (`--kv-unified`, say)
    llama_server_args: tuple[str, ...] = ()

    @classmethod
    def of(cls, args: argparse.Namespace, model: Path, logs: Path, *more: str) -> Setup:
        """The setup of `add_peer_arguments`, `--parallel` and `--n-ctx`; `more`: llama-server options."""
        args.llama_server = args.llama_server or ensure_llama_server(args.sdist)
        peer_args = (*more, *shlex.split(args.llama_server_args))
        servers = (args.llama_server, args.example_server)
        return cls(model, args.threads, args.parallel, args.n_ctx, *servers, logs, peer_args)


def add_peer_arguments(p: argparse.ArgumentParser) -> None:
    """The options of every benchmark against llama.cpp's own server."""
    p.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    p.add_argument("--threads", type=int, default=usable_cores())
    p.add_argument("--llama-server", type=Path, help="default: built from the pinned sdist (cached)")
    p.add_argument("--sdist", type=Path, help="llama-cpp-python sdist to build llama-server from")
    p.add_argument("--llama-server-args", default="", help="more llama-server options, e.g. '-ngl 999'")
    p.add_argument("--example-server", type=Path, help="examples/server/server.py of llama-cpp-python")


@dataclass(frozen=True)
class Workload:
    key: str
    options: BenchOptions
    #: the shared-prefix workload: (requests, system prompt words), its dataset made for each round
    prefix: tuple[int, int] | None = None

    def for_round(self, round_: int, logs: Path) -> BenchOptions:
        """This round's requests, new in every round: a server's prompt cache would otherwise
        answer the repeated prompts."""
        options = replace(self.options, seed=self.options.seed + round_)
        if self.prefix is None:
            return options
        count, words = self.prefix
        path = logs / f"shared-prefix-{round_ + 1}.jsonl"
        if not path.exists():
            shared_prefix_dataset(path, count, words, self.options.seed, round_)
        return replace(options, dataset=path)


def llmflow_command(setup: Setup, port: int, **more: str) -> list[str]:
    options = {"n_threads": setup.threads, "n_ctx": setup.n_ctx, "parallel": setup.parallel, **more}
    more_args = ("--engine", "llama_cpp_batched", "--max-queue", "4096")
    return llmflow_serve(port, *more_args, model=setup.model, **options)


def llama_server_command(setup: Setup, port: int) -> list[str]:
    assert setup.llama_server is not None
    return [
        str(setup.llama_server), "-m", str(setup.model), "--host", "127.0.0.1", "--port", str(port),
        "-t", str(setup.threads), "-tb", str(setup.threads), "-c", str(setup.n_ctx * setup.parallel),
        "--parallel", str(setup.parallel), "--cont-batching", "--no-webui", *setup.llama_server_args,
    ]  # fmt: skip


def example_server_command(setup: Setup, port: int) -> list[str]:
    assert setup.example_server is not None
    model = {"path": str(setup.model), "alias": setup.model.stem, "n_ctx": setup.n_ctx * setup.parallel,
             "n_seq_max": setup.parallel, "threads": setup.threads,
             "threads_batch": setup.threads}  # fmt: skip
    config = {"server": {"host": "127.0.0.1", "port": port}, "model": model}
    path = setup.logs / "example-server.json"
    path.write_text(json.dumps(config))
    return [sys.executable, "-m", "benchmarks.peers.example_server", str(setup.example_server),
            "-C", str(path)]  # fmt: skip


def llama_cpp_server_command(setup: Setup, port: int) -> list[str]:
    # --interrupt_requests False: requests queue instead of cutting the running stream short
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(setup.model), "--host", "127.0.0.1",
        "--port", str(port), "--n_threads", str(setup.threads), "--n_threads_batch", str(setup.threads),
        "--n_ctx", str(setup.n_ctx), "--interrupt_requests", "False", "--verbose", "False",
    ]  # fmt: skip


COMMANDS: dict[str, Callable[..., list[str]]] = {
    "llmflow": llmflow_command,
    "llama-server": llama_server_command,
    "example-server": example_server_command,
    "llama_cpp.server": llama_cpp_server_command,
}


def serve(setup: Setup, name: str, log: str | None = None, **more: str) -> AbstractContextManager[str]:
    """One of `COMMANDS` on a free port until the block ends (`started`), its output in `logs/LOG.log`
    (default: its name); `more`: llmflow's engine options."""
    port = free_port()
    return started(log or name, COMMANDS[name](setup, port, **more), port, setup.logs)


def shared_prefix_dataset(path: Path, requests: int, system_words: int, seed: int, round_: int = 0) -> Path:
    """Chat requests that share a long system prompt (in every round, as a deployed one stays),
    each with a question of its own (new in each round: no answer from a prompt cache)."""
    rng = random.Random(f"{seed}:system")
    words = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
             "from", "his", "her", "it", "an", "be", "this"]  # fmt: skip
    system = "You answer questions about this text.\n" + " ".join(rng.choices(words, k=system_words))
    lines = []
    for i in range(requests):
        number = 1000 * round_ + i * 7 + 3
        question = f"Question {i}, round {round_ + 1}: write a long story about the number {number}."
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        lines.append(json.dumps({"messages": messages}) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def workloads(args: argparse.Namespace, model: Path) -> list[Workload]:
    # request_usage off: every server's tokens counted the same way
    base = BenchOptions(url="", prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                        requests=args.requests, seed=args.seed, tokenizer=str(model),
                        request_usage=False)  # fmt: skip
    closed = [(c, args.requests or max(4, args.waves * c)) for c in args.concurrency]
    found = [Workload(f"c={c}", replace(base, concurrency=(c,), requests=n)) for c, n in closed]
    cap = max(args.concurrency, default=args.parallel)
    found += [Workload(f"rate={r:g}/s", replace(base, concurrency=(cap,), request_rates=(r,),
                       requests=args.rate_requests)) for r in args.rates]  # fmt: skip
    if args.prefix_concurrency:
        c, count = args.prefix_concurrency, args.requests or max(8, args.waves * args.prefix_concurrency)
        found.append(Workload(f"shared prefix, c={c}", replace(base, concurrency=(c,), requests=count),
                              prefix=(count, args.prefix_words)))  # fmt: skip
    return found


def run_one(url: str, options: BenchOptions) -> dict[str, Any]:
    document = run_bench(replace(options, url=url))
    if document["aborted"]:
        document["notes"] = [*document.get("notes", []), f"aborted: {document['aborted']}"]
    return document


def summarize(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per workload and server: median and min-max over rounds of each round's figures."""

    def pick(summary: dict[str, Any], key: str, stat: str | None) -> float | None:
        value = summary.get(key)
        return value if stat is None else value.get(stat) if value else None

    figures = {"output_tok_s": ("output_throughput", None), "ttft_p50_s": ("ttft_s", "median"),
               "ttft_p99_s": ("ttft_s", "p99"), "itl_p50_s": ("itl_s", "median"),
               "itl_p99_s": ("itl_s", "p99"), "tpot_p50_s": ("tpot_s", "median"),
               "e2e_p50_s": ("e2e_s", "median")}  # fmt: skip
    result: dict[str, Any] = {}
    for key, by_server in samples.items():
        result[key] = {}
        for server, documents in by_server.items():
            summaries = [d["levels"][0]["summary"] if d["levels"] else {} for d in documents]
            row = {name: spread(pick(s, k, stat) for s in summaries) for name, (k, stat) in figures.items()}
            row["failed"] = sum(s.get("failed", 0) for s in summaries)
            row["resent"] = sum(s.get("resent", 0) for s in summaries)
            row["rounds"] = len(documents)
            result[key][server] = row
    return result


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, "benchmarks/results/peers.json", parallel=16, rate_requests=32, prefix_concurrency=4,
               prefix_words=600, waves=4, prompt_tokens=128, max_tokens=64, rounds=5, seed=0)  # fmt: skip
    add_peer_arguments(p)
    p.add_argument("--n-ctx", type=int, default=1024, help="context window per sequence")
    p.add_argument("--concurrency", default="1,2,4,8,16", help="closed-loop levels (empty: none)")
    p.add_argument("--rates", default="0.5,1,2", help="Poisson arrival rates, requests/s")
    p.add_argument("--requests", type=int, default=None, help="per closed-loop level (default: --waves)")
    p.add_argument("--quick", action="store_true", help="a smoke run (marked as such in the result)")
    args = p.parse_args()
    args.concurrency = parse_list(args.concurrency, int, "concurrency") if args.concurrency else ()
    args.rates = parse_list(args.rates, float, "rates") if args.rates else ()
    return args


def build_of(binary: Path) -> dict[str, Any] | None:
    """How the llama-server binary was built (the stamp `build_llama_server` leaves beside it)."""
    stamp = binary.parent.parent / "llmflow-stamp.json"
    return json.loads(stamp.read_text()) if stamp.is_file() else None


def main() -> None:
    args = parse_args()
    recording = Recording.begin("peers", quick=args.quick)
    model = (args.model or default_model_path()).resolve()
    names = [n for n in COMMANDS if n != "example-server" or args.example_server]
    if args.example_server is None:
        recording.notes.append("example-server not run: no --example-server path given")
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        setup = Setup.of(args, model, logs)
        urls = {name: stack.enter_context(serve(setup, name)) for name in names}
        plan = workloads(args, model)
        samples: dict[str, dict[str, list[dict[str, Any]]]] = {w.key: {n: [] for n in names} for w in plan}
        for r in range(args.rounds):
            for i, workload in enumerate(plan):
                for name in rotated(names, r + i):
                    print(f"round {r + 1}/{args.rounds} · {workload.key} · {name}", file=sys.stderr)
                    samples[workload.key][name].append(run_one(urls[name], workload.for_round(r, logs)))
    config = {**config_of(args), "model": model.name, "servers": names, "workloads": [w.key for w in plan],
              "llama_server_build": build_of(args.llama_server),
              "seeds": "the seed plus the round's index: new prompts in every round"}  # fmt: skip
    recording.write(args.out, config=config, samples=samples, summary=summarize(samples), hide=[model, logs])


if __name__ == "__main__":
    main()
