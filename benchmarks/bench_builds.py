"""Two llama-cpp-python builds on this machine: `make`'s portable build against pip's native one.

`make` compiles llama.cpp with the CPU's instruction sets named one by one and AMX off
(scripts/build_llama_cpp.py); pip's default build uses -march=native. This measures what that
choice costs. Each build is installed in a directory of its own
(`pip install --no-deps --target DIR WHEEL`); rounds alternate between the builds, and each round is
a fresh process that loads the embedded model and streams greedy answers through llmflow, as
bench_engine.py does. Reports each build's median and min-max decode speed and time to first
token, the ratio portable / native, and each build's llama.cpp system info.

    python benchmarks/bench_builds.py --build native=DIR --build portable=DIR --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def worker(runs: int, max_tokens: int, threads: int | None) -> None:
    """One round, in this process: the build on sys.path first is the one measured."""
    import llama_cpp
    from bench_engine import run_llmflow

    from llmflow import LLM

    llm = LLM.load(engine_options={} if threads is None else {"n_threads": threads})
    run_llmflow(llm, 16)  # warm-up
    samples = [run_llmflow(llm, max_tokens) for _ in range(runs)]
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    print(json.dumps({"system_info": info.strip(), "llama_cpp": llama_cpp.__file__, "samples": samples}))
    llm.close()


def run_round(directory: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), str(HERE.parent)])}
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--runs",
        str(args.runs),
        "--max-tokens",
        str(args.max_tokens),
    ]
    if args.threads:
        command += ["--threads", str(args.threads)]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["llama_cpp"]).is_relative_to(directory), result["llama_cpp"]
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def machine() -> dict[str, str | int]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    return {"cpu": model, "cores": os.cpu_count() or 0, "python": platform.python_version()}


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True)
    return done.stdout.strip()


BENCHMARKS = HERE.parent / "BENCHMARKS.md"
START, END = "<!-- builds:start -->", "<!-- builds:end -->"


def render(summary: dict, source: str) -> str:
    """The BENCHMARKS.md table for a stored result."""
    rows = ["| build | decode tok/s, median (min-max) | TTFT ms, median (min-max) | AMX in system info |"]
    rows.append("| --- | --- | --- | --- |")
    for name, build in summary["builds"].items():
        tps, ttft = build["decode_tokens_per_s"], build["ttft_ms"]
        amx = "yes" if "AMX_INT8 = 1" in build["system_info"] else "no"
        rows.append(
            f"| {name} | {tps['median']:.1f} ({tps['min']:.1f}-{tps['max']:.1f}) "
            f"| {ttft['median']:.1f} ({ttft['min']:.1f}-{ttft['max']:.1f}) | {amx} |"
        )
    ratio = summary["decode_ratio"]
    machine = summary["machine"]
    return "\n".join(
        [
            START,
            *rows,
            "",
            f"Decode ratio {ratio['of']}: **{ratio['value']:.3f}**. {summary['method']}; {machine['cpu']}, "
            f"{machine['cores']} cores, load average {summary['load_average'][0]:.2f} at the end; "
            f"commit {summary['commit'][:10]}. Source: `{source}`, written by "
            "`python benchmarks/bench_builds.py --build native=DIR --build portable=DIR`.",
            END,
        ]
    )


def write_benchmarks_md(summary: dict, source: Path) -> None:
    text = BENCHMARKS.read_text()
    start, end = text.index(START), text.index(END) + len(END)
    relative = source.resolve().relative_to(HERE.parent)
    BENCHMARKS.write_text(text[:start] + render(summary, str(relative)) + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", default=[], help="NAME=DIR (twice)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="streams per round")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "builds.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--render-only", action="store_true", help="rewrite BENCHMARKS.md from --out")
    args = parser.parse_args()
    if args.worker:
        worker(args.runs, args.max_tokens, args.threads)
        return
    if args.render_only:
        write_benchmarks_md(json.loads(args.out.read_text()), args.out)
        return

    builds = dict(item.split("=", 1) for item in args.build)
    if len(builds) != 2:
        parser.error("name two builds: --build native=DIR --build portable=DIR")
    rounds: dict[str, list[dict]] = {name: [] for name in builds}
    started = time.time()
    for i in range(args.rounds):
        order = list(builds.items()) if i % 2 == 0 else list(reversed(builds.items()))
        for name, directory in order:
            rounds[name].append(run_round(Path(directory).resolve(), args))
            print(f"round {i + 1}/{args.rounds} {name}: done", file=sys.stderr, flush=True)

    summary: dict = {
        "commit": commit(),
        "machine": machine(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "method": f"{args.rounds} alternated rounds x {args.runs} greedy streams of {args.max_tokens} tokens",
        "builds": {},
    }
    for name, results in rounds.items():
        samples = [s for r in results for s in r["samples"]]
        summary["builds"][name] = {
            "system_info": results[0]["system_info"],
            "decode_tokens_per_s": spread([s[1] for s in samples]),
            "ttft_ms": spread([s[0] * 1000 for s in samples]),
            "samples": [r["samples"] for r in results],
        }
    names = list(builds)
    first, second = (summary["builds"][n]["decode_tokens_per_s"]["median"] for n in names)
    summary["decode_ratio"] = {"of": f"{names[1]} / {names[0]}", "value": second / first}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    write_benchmarks_md(summary, args.out)
    print(json.dumps({k: v for k, v in summary.items() if k != "builds"}, indent=2))
    for name in names:
        build = summary["builds"][name]
        print(name, build["decode_tokens_per_s"], build["ttft_ms"])


if __name__ == "__main__":
    main()
