"""`llmflow serve` against llama-cpp-python's own server, measured with `llmflow bench`.

Both servers run on 127.0.0.1 with the same GGUF, thread count and context size. For each
concurrency level the two are benchmarked one after the other, in alternating order, for
several rounds; each server's row is its median round (by output throughput), so every number
in a row comes from one real run. Output tokens are counted the same way for both (the
answer re-tokenized with the model's tokenizer): llama-cpp-python sends no usage.

llama-cpp-python's server lets a new request interrupt the running stream by default; it is
started with `--interrupt_requests False`, so that concurrent requests queue as they do in
llmflow. It needs the `compare` extra (starlette-context, pydantic-settings).

    .venv/bin/python benchmarks/compare.py --threads 2 --concurrency 1,2,4,8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from llmflow.bench import BenchOptions, markdown_table, plot, run_bench, write_json
from llmflow.bench.driver import parse_list
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_process import started

N_CTX = 4096


def server_commands(model: Path, threads: int, port: int) -> dict[str, list[str]]:
    return {
        "llmflow": [
            sys.executable, "-m", "llmflow", "serve", str(model),
            "--host", "127.0.0.1", "--port", str(port),
            "--engine-option", f"n_threads={threads}", "--engine-option", f"n_ctx={N_CTX}",
            "--max-queue", "1024", "--log-level", "warning",
        ],
        "llama-cpp-python": [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model),
            "--host", "127.0.0.1", "--port", str(port + 1),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(N_CTX),
            "--interrupt_requests", "False", "--verbose", "False",
        ],
    }  # fmt: skip


def free_port_pair() -> int:
    """A port p such that p and p + 1 are both free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


def run_level(url: str, concurrency: int, args: argparse.Namespace, model: Path) -> dict[str, Any]:
    options = BenchOptions(
        url=url,
        concurrency=(concurrency,),
        requests=args.requests,
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        seed=args.seed,
        tokenizer=str(model),
        request_usage=False,  # count both servers' tokens the same way
    )
    document = run_bench(options)
    if document["aborted"]:
        raise SystemExit(f"{url}: {document['aborted']}")
    return document


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose output throughput is the median (the lower middle one for even counts)."""
    ordered = sorted(rounds, key=lambda d: d["levels"][0]["summary"]["output_throughput"] or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def merged(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One results document with one level per concurrency, from single-level documents."""
    result = dict(documents[0])
    result["levels"] = [d["levels"][0] for d in documents]
    result["config"] = {**result["config"], "requests": [d["config"]["requests"][0] for d in documents]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--requests", type=int, default=None, help="per level; default: 4 per slot, >= 8")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    model = (args.model or default_model_path()).resolve()
    levels = parse_list(args.concurrency, int, "concurrency")
    port = free_port_pair()
    commands = server_commands(model, args.threads, port)
    names = list(commands)
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {(n, c): [] for n in names for c in levels}

    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        urls = {
            name: stack.enter_context(started(name, commands[name], port + i, logs, timeout_s=180))
            for i, name in enumerate(names)
        }
        for r in range(args.rounds):
            for i, concurrency in enumerate(levels):
                order = names if (r + i) % 2 == 0 else names[::-1]
                for name in order:
                    print(
                        f"round {r + 1}/{args.rounds} · concurrency {concurrency} · {name}", file=sys.stderr
                    )
                    rounds[name, concurrency].append(run_level(urls[name], concurrency, args, model))

    runs = [(name, merged([median_round(rounds[name, c]) for c in levels])) for name in names]
    write_results(runs, rounds, args, model)


def write_results(runs, rounds, args: argparse.Namespace, model: Path) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name, document in runs:
        local = json.dumps(document).replace(str(model), model.name)  # no local paths in results
        write_json(json.loads(local), out / f"compare-{name}.json")
    threads = f"{args.threads} thread" + ("s" if args.threads != 1 else "")
    title = f"{model.name}, {threads}, {args.prompt_tokens} prompt / {args.max_tokens} output tokens"
    plot(runs, out / "compare.png", title=title)
    table = markdown_table(runs)
    (out / "compare.md").write_text(f"{title}; median of {args.rounds} alternating rounds\n\n{table}")
    spread = {
        f"{name} c={c}": [d["levels"][0]["summary"]["output_throughput"] for d in docs]
        for (name, c), docs in rounds.items()
    }
    meta = {
        "model": model.name,
        "threads": args.threads,
        "rounds": args.rounds,
        "machine": {
            "platform": platform.platform(),
            "cpus": usable_cores(),
            "python": platform.python_version(),
        },
        "output_throughput_per_round": spread,
        "output_throughput_spread": {k: _spread(v) for k, v in spread.items()},
    }
    (out / "compare-meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(table)
    print(f"results in {out}/ (compare.md, compare.png, compare-*.json)", file=sys.stderr)


def _spread(values: list[float | None]) -> dict[str, float] | None:
    clean = [v for v in values if v is not None]
    if not clean:
        return None
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


if __name__ == "__main__":
    main()
