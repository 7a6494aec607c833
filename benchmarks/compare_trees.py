"""One benchmark script on two checkouts of llmflow, alternated in one run: is a change's hot path
slower? Each round runs each tree's own script on its own code in a child process, the first tree
alternating, and reads the named figures from the result; a figure is looked up by name anywhere in
the result (formats changed over time), a spread counting as its median (`bench_serving.py` shows
a use).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.record import Recording, spread
from benchmarks.suite import parser


def find(document: Any, name: str) -> float | None:
    """The first value called `name` in the nested result, as a number."""
    if isinstance(document, dict):
        if name in document:
            value = document[name]
            return value.get("median") if isinstance(value, dict) else value
        found = (find(value, name) for value in document.values())
        return next((value for value in found if value is not None), None)
    return None


def run_once(tree: Path, script: str, args: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(tree / script), *args, "--out", str(out)]
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> None:
    p = parser(__doc__, rounds=4)
    p.add_argument("--tree", action="append", type=Path, required=True, help="twice: old, new")
    p.add_argument("--label", action="append", default=None, help="a name per tree (default: old, new)")
    p.add_argument("--script", required=True, help="the benchmark, relative to each tree")
    p.add_argument("--args", default="", help="the script's arguments, as one string")
    p.add_argument("--figure", action="append", required=True, help="a figure of its result to compare")
    args = p.parse_args()
    recording = Recording.begin(f"compare_trees:{Path(args.script).stem}")
    trees = dict(zip(args.label or ["old", "new"], (tree.resolve() for tree in args.tree), strict=True))
    samples: dict[str, Any] = {label: {f: [] for f in args.figure} for label in trees}
    commits = {label: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                                     text=True).stdout.strip() for label, tree in trees.items()}  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for label, tree in list(trees.items())[:: 1 if round_ % 2 == 0 else -1]:
                print(f"round {round_ + 1}/{args.rounds} · {label}", file=sys.stderr, flush=True)
                result = run_once(tree, args.script, shlex.split(args.args), Path(scratch) / "result.json")
                for figure in args.figure:
                    samples[label][figure].append(find(result, figure))
    summary = {label: {f: spread(v) for f, v in figures.items()} for label, figures in samples.items()}
    config = {"script": args.script, "args": args.args, "rounds": args.rounds, "trees": commits}
    recording.write(args.out, config=config, samples=samples, summary=summary, hide=map(str, trees.values()))


if __name__ == "__main__":
    main()
