"""`python -m benchmarks run [NAME...] [--quick]` runs benchmarks (all CPU ones by default), each
writing its result file; `python -m benchmarks render` writes the numbers of BENCHMARKS.md, the
README and docs/ from the stored result files; `python -m benchmarks list` names them;
`python -m benchmarks strip FILE...` moves a result file's raw samples to the git-ignored `raw/`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.record import write_split
from benchmarks.render import render_all
from benchmarks.suite import BY_NAME, PEER_MODULES, RESULTS, SUITE, Benchmark

REPO = Path(__file__).resolve().parents[1]


def run(benchmark: Benchmark, quick: bool, extra: list[str]) -> int:
    out = (RESULTS / "quick" if quick else RESULTS) / f"{benchmark.name}.json"
    arguments = [*(benchmark.quick if quick else benchmark.args), "--out", str(out.relative_to(REPO)), *extra]
    command = [sys.executable, "-m", benchmark.module, *arguments]
    print(f"==> {benchmark.name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if quick:
        env["LLMFLOW_BENCH_QUICK"] = "1"
    return subprocess.run(command, cwd=REPO, env=env, check=False).returncode


def peer_arguments(args: argparse.Namespace) -> list[str]:
    given = {"--example-server": args.example_server, "--sdist": args.sdist,
             "--llama-server": args.llama_server}  # fmt: skip
    return [part for flag, path in given.items() if path for part in (flag, str(path.resolve()))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="run benchmarks, then render")
    runner.add_argument("names", nargs="*", choices=[[], *BY_NAME], metavar="NAME", help=", ".join(BY_NAME))
    runner.add_argument("--quick", action="store_true", help="a smoke run into benchmarks/results/quick/")
    runner.add_argument("--example-server", type=Path, help="examples/server/server.py of llama-cpp-python")
    runner.add_argument("--sdist", type=Path, help="llama-cpp-python sdist to build llama-server from")
    runner.add_argument("--llama-server", type=Path, help="an already built llama-server")
    runner.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    renderer = commands.add_parser("render", help="write the documents' numbers from the results")
    renderer.add_argument("--results", type=Path, default=RESULTS)
    renderer.add_argument("--check", action="store_true", help="fail if the documents are not up to date")
    commands.add_parser("list", help="name every benchmark")
    stripper = commands.add_parser("strip", help="move result files' raw samples to raw/ beside them")
    stripper.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "strip":
        for path in args.files:
            write_split(path, json.loads(path.read_text(encoding="utf-8")))
    elif args.command == "list":
        for benchmark in SUITE:
            print(f"{benchmark.name:12} {benchmark.about}")
    elif args.command == "render":
        changed = render_all(args.results, write=not args.check)
        if args.check and changed:
            raise SystemExit(f"out of date: {', '.join(changed)} (run python -m benchmarks render)")
    else:  # run: the named benchmarks (all by default), then the documents from what they wrote
        failed = []
        for name in args.names or [b.name for b in SUITE]:
            extra = peer_arguments(args) if BY_NAME[name].module in PEER_MODULES else []
            if run(BY_NAME[name], args.quick, extra) != 0:
                failed.append(name)
                if not args.keep_going:
                    break
        render_all(RESULTS, write=True)
        if failed:
            raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
