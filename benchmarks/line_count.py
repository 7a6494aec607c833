"""Lines of the server, observability and timing code at two git revisions, per file and in all.

The measure behind issue 18's "the line count goes down": every `.py` file under `llmflow/server/`
and `llmflow/observability/`, and the timing modules wherever they were (`llmflow/timing.py`,
`llmflow/server/timings.py`, `llmflow/observability/timings.py`). `lines` counts every line (as
`wc -l`: blank and comment lines included); `code` leaves out blank lines. Files are read with
`git show REV:path`, so the working tree is not touched.

    python benchmarks/line_count.py 18d2ca6 HEAD
"""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass

PACKAGES = ("llmflow/server/", "llmflow/observability/")
TIMING_MODULES = ("llmflow/timing.py", "llmflow/server/timings.py", "llmflow/observability/timings.py")


@dataclass(frozen=True)
class Count:
    lines: int
    code: int


def in_scope(path: str) -> bool:
    return path.endswith(".py") and (path.startswith(PACKAGES) or path in TIMING_MODULES)


def git(*args: str) -> str:
    return subprocess.run(("git", *args), check=True, capture_output=True, text=True).stdout


def counts(rev: str) -> dict[str, Count]:
    """Every file in scope at `rev` and its counts."""
    paths = [p for p in git("ls-tree", "-r", "--name-only", rev, "llmflow").splitlines() if in_scope(p)]
    found = {}
    for path in paths:
        lines = git("show", f"{rev}:{path}").splitlines()
        found[path] = Count(len(lines), sum(1 for line in lines if line.strip()))
    return found


def total(found: dict[str, Count]) -> Count:
    return Count(sum(c.lines for c in found.values()), sum(c.code for c in found.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the earlier revision")
    parser.add_argument("after", nargs="?", default="HEAD", help="the later revision (default HEAD)")
    args = parser.parse_args()
    revs = {rev: git("rev-parse", "--short", rev).strip() for rev in (args.before, args.after)}
    before, after = counts(args.before), counts(args.after)
    print(f"{'':<44} {'lines':^13} {'code':^13}")
    print(f"{'file':<44} {'before':>6} {'after':>6} {'before':>6} {'after':>6}")
    for path in sorted(before.keys() | after.keys()):
        a, b = before.get(path, Count(0, 0)), after.get(path, Count(0, 0))
        print(f"{path:<44} {a.lines:>6} {b.lines:>6} {a.code:>6} {b.code:>6}")
    a, b = total(before), total(after)
    print(f"{'total':<44} {a.lines:>6} {b.lines:>6} {a.code:>6} {b.code:>6}")
    print(
        f"{revs[args.before]} -> {revs[args.after]}: lines {a.lines} -> {b.lines} ({b.lines - a.lines:+d}), "
        f"without blank lines {a.code} -> {b.code} ({b.code - a.code:+d})"
    )


if __name__ == "__main__":
    main()
