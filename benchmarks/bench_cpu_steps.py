"""Where the CPU distance to `llama-server` goes: llama.cpp's own batched decode against the
batching engine's steps, at the peers' workload, flash attention off and on.

The peer tables measure servers from outside. This splits llmflow's side from inside, against
`llama-batched-bench` (no server, no sampling: all prompts in one pass, then every sequence
decoded together, which is also how `llama-server` runs a closed loop whose requests arrive
together). For each setting, alternated over rounds, in this process:

- `llama-batched-bench` with the same model, threads, prompt and answer lengths: its decode rate
  and its generated tokens over prefill and decode together;
- one wave of the same number of generations on the engine, every step timed: the forward pass,
  the samplers and the rest (the scheduler's Python), and the wave's wall time cut by what each
  step carried (full-width decode steps, steps with prompt tokens, narrower decode steps).

    python -m benchmarks.bench_cpu_steps --rounds 3 [--llama-batched-bench PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu.bench_llama_cpp_gpu import engine_runs
from benchmarks.peers.build_llama_server import DEFAULT_CACHE, ensure_llama_server
from benchmarks.record import Recording, local_path_hidden, spread
from llmflow.engines.llama_cpp import usable_cores
from llmflow.model_files import default_model_path


class _Log:
    """What `engine_runs` needs of a run: its arguments and a log."""

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def log(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)


def batched_bench(binary: Path, model: Path, args: argparse.Namespace, flash_attn: bool) -> dict[str, Any]:
    command = [
        str(binary), "-m", str(model), "-t", str(args.threads), "-tb", str(args.threads),
        "-fa", "on" if flash_attn else "off", "-c", str(args.streams * args.n_ctx),
        "-b", "2048", "-ub", "512", "-npp", str(args.prompt_tokens), "-ntg", str(args.max_tokens),
        "-npl", str(args.streams), "--output-format", "jsonl",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        raise SystemExit(f"llama-batched-bench failed: {done.stderr[-2000:]}")
    row = rows[-1]
    return {
        "command": " ".join(local_path_hidden(a) for a in command),
        "row": row,
        "decode_tok_s": row["speed_tg"],
        "decode_step_s": row["t_tg"] / row["tg"],
        "generated_tok_s": row["pl"] * row["tg"] / (row["t_pp"] + row["t_tg"]),
        "prefill_s": row["t_pp"],
    }


def engine_wave(args: argparse.Namespace, model: Path, flash_attn: bool) -> dict[str, Any]:
    run_args = argparse.Namespace(
        concurrency=[args.streams],
        n_ctx=args.n_ctx,
        engine_option=[
            f"flash_attn={str(flash_attn).lower()}",
            f"n_threads={args.threads}",
            "ignore_eos=true",
        ],
        seed=args.seed,
    )
    workload = f"{args.prompt_tokens}/{args.max_tokens}"
    split = engine_runs(_Log(run_args), "engine", model, [], [workload])[workload]
    split.pop("raw_full_steps", None)
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--n-ctx", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--llama-batched-bench", type=Path, default=None, help="default: build it (peers cache)"
    )
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--quick", action="store_true", help="a smoke run (marked as such in the result)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu_steps.json"))
    args = parser.parse_args()
    recording = Recording.begin("cpu_steps")
    binary = (
        args.llama_batched_bench or ensure_llama_server(None, args.cache_dir).parent / "llama-batched-bench"
    )
    model = default_model_path()

    samples: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for r in range(args.rounds):
        for flash_attn in (False, True) if r % 2 == 0 else (True, False):
            key = "on" if flash_attn else "off"
            bench = batched_bench(binary, model, args, flash_attn)
            wave = engine_wave(args, model, flash_attn)
            samples[key].append({"batched_bench": bench, "engine": wave})
            rates = f"batched-bench decode {bench['decode_tok_s']:.1f}, engine {wave['generated_tok_s']:.1f}"
            print(f"round {r + 1} flash attention {key}: {rates} tok/s", flush=True)

    summary = {key: _summary(rounds) for key, rounds in samples.items()}
    config = {
        "model": model.name,
        "threads": args.threads,
        "streams": args.streams,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "quick": args.quick,
    }
    recording.write(args.out, config=config, samples=samples, summary=summary)


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def series(part: str, key: str) -> list[float]:
        return [r[part][key] for r in rounds if r[part].get(key) is not None]

    def share(kind: str) -> list[float]:
        return [r["engine"]["wall_by_step_kind_s"][kind] / r["engine"]["wall_s"] for r in rounds]

    out: dict[str, Any] = {
        "batched_bench_decode_tok_s": spread(series("batched_bench", "decode_tok_s")),
        "batched_bench_decode_step_ms": spread(v * 1e3 for v in series("batched_bench", "decode_step_s")),
        "batched_bench_generated_tok_s": spread(series("batched_bench", "generated_tok_s")),
        "engine_generated_tok_s": spread(series("engine", "generated_tok_s")),
        "engine_full_step_ms": spread(v * 1e3 for v in series("engine", "step_s_median")),
        "engine_forward_ms": spread(v * 1e3 for v in series("engine", "gpu_s_median")),
        "engine_samplers_ms": spread(v * 1e3 for v in series("engine", "sample_s_median")),
        "engine_python_ms": spread(v * 1e3 for v in series("engine", "python_s_median")),
        "wall_share": {
            kind: spread(share(kind))
            for kind in ("full_decode", "with_prompt_tokens", "partial_decode", "outside_steps")
        },
    }
    ratios = [
        r["engine"]["generated_tok_s"] / r["batched_bench"]["generated_tok_s"]
        for r in rounds
        if r["engine"].get("generated_tok_s")
    ]
    out["engine_over_batched_bench_generated"] = spread(ratios)
    out["rounds"] = len(rounds)
    out["engine_steps_median"] = statistics.median(r["engine"]["steps"] for r in rounds)
    return out


if __name__ == "__main__":
    main()
