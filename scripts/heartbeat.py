#!/usr/bin/env python3
"""Run a command and pass its output through; while it says nothing, say that it still runs.

pip prints nothing while it downloads and unpacks large wheels (torch, pyspark: a minute or more),
and a compiler can be quiet as long; someone watching cannot tell that from a hang. After
`QUIET_S` seconds without output this prints one line with what is being done and for how long.

    python3 scripts/heartbeat.py "installing the test extras" -- pip install ...

Standard library only: it runs before the project's virtual environment exists.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping

QUIET_S = 8.0


def watch(
    command: list[str],
    label: str,
    on_output: Callable[[bytes], None],
    env: Mapping[str, str] | None = None,
    quiet_s: float = QUIET_S,
) -> int:
    """Run `command`, hand each piece of its output (stdout and stderr) to `on_output`, and print
    a line saying it is still `label` whenever it has been quiet for `quiet_s`; its exit code."""
    started = last = time.monotonic()
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            now = time.monotonic()
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                on_output(data)
                last = now
            elif now - last >= quiet_s:
                print(f"    ... still {label} ({now - started:.0f} s so far)", flush=True)
                last = now
    return process.returncode


def pass_through(data: bytes) -> None:
    """Copy a command's output to ours as it comes."""
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.split("\n\n")[2].strip(), file=sys.stderr)
        return 2
    return watch(argv[2:], argv[0], pass_through)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
