"""Do two renderings of a document differ in more than their numbers? `make bench` run twice
must change only figures (and what follows from them: commits, dates, load averages, whether a
target was met), never a table's shape, a row, a label or the prose around it.

    python -m benchmarks.doc_diff FIRST.md SECOND.md   # exit 1 and the differing lines if so
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

#: a figure as the renderer writes it (1,234.5, -0.8, 12%, 0.97), a commit hash with its
#: "+ changes" mark, a date, or a verdict the renderer derives from figures (a target met or
#: missed, a peer ahead or behind)
_FIGURE = re.compile(
    r"`[0-9a-f]{7,40}( \+ changes)?`|\d{4}-\d{2}-\d{2}|-?\d[\d,]*(\.\d+)?|\b(met|missed|ahead|behind)\b"
)


#: facts of the machine and the run that a result line states beside its figures: the CPU's
#: model (runs on different machines), and a count of resent requests (written only when not 0)
_MACHINE = re.compile(r"(?<=; )[^;`]+(?=, \d+ usable cores)")
_RESENT = re.compile(r" \(\d+ resent\)")


def masked(text: str) -> list[str]:
    """The document's lines with every figure and run fact replaced by `#`."""
    return [_FIGURE.sub("#", _MACHINE.sub("#", _RESENT.sub("", line))) for line in text.splitlines()]


def differences(first: str, second: str) -> list[str]:
    """Unified-diff lines between the masked documents (empty: only numbers differ)."""
    return [
        line
        for line in difflib.unified_diff(masked(first), masked(second), "first", "second", lineterm="", n=0)
        if not line.startswith("@@")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args()
    found = differences(args.first.read_text(encoding="utf-8"), args.second.read_text(encoding="utf-8"))
    if found:
        print("\n".join(found))
        sys.exit(1)
    print("only numbers differ")


if __name__ == "__main__":
    main()
