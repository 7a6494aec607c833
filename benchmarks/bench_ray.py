"""Ray Serve against `llmflow serve` on the same machine, in the same run: what Ray's proxy and
llmflow's ingress cost a stream, and what two replicas give.

Four targets, the embedded GGUF, `llmflow bench` at each concurrency (chat, greedy, the same
prompts): `llmflow serve` with 2 threads (`serve-2t`) and with 1 (`serve-1t`, the replica's
own setting, so that the 1-stream ratio measures the proxy and nothing else), and Ray Serve with
one and with two replicas of 1 thread each (`ray-1x1t`, `ray-2x1t`). The two servers run as
child processes, Ray as a local cluster of this process; each round visits the targets in a
rotated order (a Ray target is deployed when its turn comes). The CPU time of Ray's proxy and of
llmflow's ingress is read from their processes around each Ray target's turn, less what they
spend idle (read over 5 s before the turn), and divided by the tokens streamed: what relaying
one token costs, the figure the paper estimate of proxies needs.

    python -m benchmarks.bench_ray --rounds 3 --max-tokens 64 --out benchmarks/results/ray.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from benchmarks.record import Recording, paired_ratios, spread
from benchmarks.serve_process import free_port, started
from llmflow.bench import BenchOptions, run_bench
from llmflow.bench.driver import parse_list
from llmflow.model_files import default_model_path

TARGETS = ("serve-2t", "serve-1t", "ray-1x1t", "ray-2x1t")
REPLICAS = {"ray-1x1t": 1, "ray-2x1t": 2}
#: process titles Ray gives the relaying processes
RELAYS = {"proxy": "ray::ProxyActor", "ingress": "ray::ServeReplica:llmflow:llmflow-ingress"}
#: how long the relays' idle CPU is read before each Ray turn
IDLE_WINDOW_S = 5.0


def serve_command(threads: int, parallel: int, port: int) -> list[str]:
    return [
        sys.executable, "-m", "llmflow", "serve", "--threads", str(threads), "--parallel", str(parallel),
        "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip


def relay_cpu_s() -> dict[str, float]:
    """CPU seconds so far of Ray's proxy and of llmflow's ingress (all their processes)."""
    spent = dict.fromkeys(RELAYS, 0.0)
    for process in psutil.process_iter(["cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        for name, prefix in RELAYS.items():
            if title.startswith(prefix):
                try:
                    times = process.cpu_times()
                except psutil.Error:
                    continue
                spent[name] += times.user + times.system
    return spent


def idle_relay_cpu_rate(window_s: float = IDLE_WINDOW_S) -> dict[str, float]:
    """CPU seconds per second the relays spend with no request (health checks, metrics pushes,
    long polls): taken off their CPU during a turn, so that what remains is the streams' cost."""
    before = relay_cpu_s()
    time.sleep(window_s)
    after = relay_cpu_s()
    return {name: (after[name] - before[name]) / window_s for name in RELAYS}


class RayTargets:
    """A local Ray cluster in this process and Serve's proxy; `deploy(replicas)` (re)deploys."""

    def __init__(self, stack: ExitStack, parallel: int):
        import ray
        from ray import serve

        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        stack.callback(ray.shutdown)
        self.port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})
        stack.callback(serve.shutdown)
        self._parallel = parallel
        self._deployed: int | None = None

    def deploy(self, replicas: int) -> str:
        from ray import serve

        from llmflow.ray import build
        from llmflow.ray.launch import APP_NAME

        if self._deployed != replicas:
            args = {"threads": 1, "parallel": self._parallel, "replicas": replicas}
            serve.run(build(args), name=APP_NAME, route_prefix="/")
            self._deployed = replicas
        return f"http://127.0.0.1:{self.port}/v1"


def summarize(samples: dict[str, dict[str, list[dict[str, Any]]]], relays: dict[str, list[dict]]) -> dict:
    """Per concurrency and target: medians [min-max] over rounds; the paired ratios the issue
    names; the relays' CPU per streamed token."""
    figures: dict[str, Any] = {}
    for level, by_target in samples.items():
        figures[level] = {}
        for target, documents in by_target.items():
            summaries = [d["levels"][0]["summary"] if d["levels"] else {} for d in documents]
            figures[level][target] = {
                "output_tok_s": spread(s.get("output_throughput") for s in summaries),
                "ttft_p50_s": spread((s.get("ttft_s") or {}).get("median") for s in summaries),
                "itl_p50_s": spread((s.get("itl_s") or {}).get("median") for s in summaries),
                "failed": sum(s.get("failed", 0) for s in summaries),
            }

    def per_round(level: str, target: str, key: str, stat: str | None = None) -> list[float | None]:
        values = []
        for document in samples[level][target]:
            summary = document["levels"][0]["summary"] if document["levels"] else {}
            value = summary.get(key)
            values.append(value.get(stat) if stat and value else value)
        return values

    one = "c=1"
    ratios = {
        "proxy_tok_s_ratio_1_stream": paired_ratios(
            per_round(one, "ray-1x1t", "output_throughput"), per_round(one, "serve-1t", "output_throughput")
        ),
        "ray_1x1t_over_serve_2t_1_stream": paired_ratios(
            per_round(one, "ray-1x1t", "output_throughput"), per_round(one, "serve-2t", "output_throughput")
        ),
        "proxy_ttft_delta_s_1_stream": spread(
            (a - b) if a is not None and b is not None else None
            for a, b in zip(
                per_round(one, "ray-1x1t", "ttft_s", "median"),
                per_round(one, "serve-1t", "ttft_s", "median"),
                strict=True,
            )
        ),
    }
    for level in samples:
        ratios[f"ray_2x1t_over_serve_2t_{level}"] = paired_ratios(
            per_round(level, "ray-2x1t", "output_throughput"),
            per_round(level, "serve-2t", "output_throughput"),
        )
    turns = [turn for turns in relays.values() for turn in turns]
    relay_cost = {
        name: spread(turn[name] / turn["tokens"] * 1e6 if turn["tokens"] else None for turn in turns)
        for name in RELAYS
    }
    return {"levels": figures, "ratios": ratios, "relay_cpu_us_per_token": relay_cost}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--concurrency", type=lambda text: parse_list(text, int, "concurrency"), default=(1, 4, 8)
    )
    parser.add_argument(
        "--requests", type=int, default=None, help="per level (default: 2x concurrency, >= 4)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=8, help="sequences per server and per replica")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    recording = Recording.begin("ray")
    model = default_model_path().resolve()
    base = BenchOptions(
        url="",
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        seed=args.seed,
        tokenizer=str(model),
        request_usage=False,
    )
    levels = {
        f"c={c}": replace(base, concurrency=(c,), requests=args.requests or max(4, 2 * c))
        for c in args.concurrency
    }
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        level: {t: [] for t in TARGETS} for level in levels
    }
    relays: dict[str, list[dict]] = {t: [] for t in REPLICAS}
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        urls = {}
        for name, threads in (("serve-2t", 2), ("serve-1t", 1)):
            port = free_port()
            urls[name] = stack.enter_context(
                started(name, serve_command(threads, args.parallel, port), port, logs)
            )
        ray_targets = RayTargets(stack, args.parallel)
        for r in range(args.rounds):
            shift = r % len(TARGETS)
            for target in TARGETS[shift:] + TARGETS[:shift]:
                url = ray_targets.deploy(REPLICAS[target]) if target in REPLICAS else urls[target]
                idle = idle_relay_cpu_rate() if target in REPLICAS else {}
                before, started_at = relay_cpu_s(), time.monotonic()
                tokens = 0
                for level, options in levels.items():
                    print(f"round {r + 1}/{args.rounds} · {level} · {target}", file=sys.stderr, flush=True)
                    document = run_bench(replace(options, url=url))
                    samples[level][target].append(document)
                    tokens += (
                        document["levels"][0]["summary"].get("total_output_tokens", 0)
                        if document["levels"]
                        else 0
                    )
                if target in REPLICAS:
                    after, wall = relay_cpu_s(), time.monotonic() - started_at
                    spent = {k: after[k] - before[k] - idle[k] * wall for k in RELAYS}
                    relays[target].append({"tokens": tokens, "wall_s": wall, "idle_cpu_rate": idle, **spent})
    config = {
        "model": model.name,
        "targets": list(TARGETS),
        "concurrency": list(args.concurrency),
        "requests": {level: options.requests for level, options in levels.items()},
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "parallel": args.parallel,
        "rounds": args.rounds,
        "ray": _ray_version(),
    }
    recording.write(
        args.out, config=config, samples={"bench": samples, "relays": relays},
        summary=summarize(samples, relays), hide=[model, logs],
    )  # fmt: skip


def _ray_version() -> str:
    import ray

    return ray.__version__


if __name__ == "__main__":
    main()
