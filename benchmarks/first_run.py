"""What a new user waits for: `make demo`, then `make test`, in a fresh clone with empty caches.

Clones the committed HEAD into a scratch directory, points pip's cache and llmflow's wheel cache
at empty directories there, and times each command, the size of `.venv` after each, and the longest
stretch without any output (a user cannot tell a long silence from a hang). Writes
benchmarks/results/first_run.json and the README's first-run lines from it.

    python benchmarks/first_run.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "first_run.json"
README = ROOT / "README.md"
START, END = "<!-- first-run:start -->", "<!-- first-run:end -->"


#: what `make test` prints when the installing is over and pytest starts
TESTS_START = b"==> Running the tests"


def timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict:
    """Run `command`, copying its output to `log`; its seconds, its exit code, and its longest
    silence before the tests start (a test may well run for a minute without output)."""
    started = last = time.monotonic()
    longest = 0.0
    testing = False
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            now = time.monotonic()
            if not testing:
                longest = max(longest, now - last)
            testing = testing or TESTS_START in data
            last = now
            sink.write(data)
        code = process.wait()
    return {
        "seconds": round(time.monotonic() - started, 1),
        "exit_code": code,
        "longest_silence_s": round(longest, 1),
    }


def disk_mb(path: Path) -> float:
    done = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[0])


def pytest_summary(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if re.search(r"\d+ passed", line)]
    return lines[-1].strip("= ") if lines else ""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def measure(scratch: Path) -> dict:
    clone = scratch / "llmflow"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    env = {
        **os.environ,
        "PIP_CACHE_DIR": str(scratch / "pip-cache"),
        "LLMFLOW_WHEEL_CACHE": str(scratch / "wheels"),
    }
    env.pop("VIRTUAL_ENV", None)
    result: dict = {
        "commit": commit.strip(),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "load_average_before": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d"),
    }
    for command in ("demo", "test"):
        log = scratch / f"make-{command}.log"
        result[command] = timed(["make", command], clone, env, log)
        result[command]["venv_mb"] = disk_mb(clone / ".venv")
        print(f"make {command}: {result[command]}", flush=True)
    result["test"]["pytest"] = pytest_summary(scratch / "make-test.log")
    result["load_average_after"] = os.getloadavg()
    return result


def render(result: dict) -> str:
    demo, test = result["demo"], result["test"]
    return "\n".join(
        [
            START,
            f"- `make demo`: {demo['seconds'] / 60:.1f} minutes, `.venv` {demo['venv_mb'] / 1024:.1f} GB; "
            f"never silent for more than {demo['longest_silence_s']:.0f} s.",
            f"- `make test` after it: {test['seconds'] / 60:.1f} minutes (the tests themselves included), "
            f"`.venv` {test['venv_mb'] / 1024:.1f} GB; never silent for more than "
            f"{test['longest_silence_s']:.0f} s before the tests start ({test.get('pytest', '')}).",
            f"- ({result['machine']['cpu']}, {result['machine']['cores']} cores, {result['date']}; "
            f"`python benchmarks/first_run.py`, benchmarks/results/first_run.json)",
            END,
        ]
    )


def write_readme(result: dict) -> None:
    text = README.read_text()
    start, end = text.index(START), text.index(END) + len(END)
    README.write_text(text[:start] + render(result) + text[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the README from the stored result"
    )
    args = parser.parse_args()
    if not args.render_only:
        scratch = args.keep or Path(tempfile.mkdtemp(prefix="llmflow-first-run-"))
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            result = measure(scratch)
        finally:
            if args.keep is None:
                shutil.rmtree(scratch, ignore_errors=True)
        RESULT.write_text(json.dumps(result, indent=2) + "\n")
    result = json.loads(RESULT.read_text())
    write_readme(result)
    ok = result["demo"]["exit_code"] == 0 and result["test"]["exit_code"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
