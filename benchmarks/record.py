"""One shape for every benchmark's result file: what ran, where, on which commit, and its summary.

`Recording.begin` before measuring and `Recording.write` after both take the load average, so a
reader can tell a quiet machine from a shared one. The result file keeps what the renderer reads
(summary, settings, commit, machine) and goes into git; the raw samples go beside it under `raw/`,
which git ignores (`python -m benchmarks strip FILE...` splits a file written elsewhere).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SCHEMA = "llmflow-bench/1"
#: the keys that hold raw samples, in this format and the GPU scripts' own: they go to `raw/`
SAMPLE_KEYS = frozenset({"samples", "requests_of_median_round", "raw_full_steps"})
REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "llama-cpp-python", "mlflow", "fastapi", "uvicorn", "uvloop", "httptools", "sse-starlette",
    "httpx", "openai", "numpy", "pyspark",
)  # fmt: skip


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    """Median, min and max of the measured values (None: a run that gave no value is left out)."""
    clean = [float(v) for v in values if v is not None]
    if not clean:
        return None
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean), "n": len(clean)}


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


#: paths whose changes leave every measurement as it was
NOT_MEASURED = ("benchmarks/results", "*.md")


def output(*command: str, timeout: float | None = None) -> str | None:
    """What a command run in the repository prints, or None where it cannot run or fails."""
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> dict[str, Any]:
    """The commit measured and whether the tree had changes on top of it that can change a
    measurement: result files and the documents rendered from them do not count (a run of
    several benchmarks writes them as it goes)."""
    excluded = [f":(exclude){path}" for path in NOT_MEASURED]
    changes = output("git", "status", "--porcelain", "-uno", "--", ".", *excluded)
    return {"sha": output("git", "rev-parse", "HEAD"), "dirty": bool(changes)}


def cpu_model() -> str:
    """`lscpu`'s model name (platform.processor() is empty on most Linux machines)."""
    lines = (output("lscpu") or "").splitlines()
    names = [line.partition(":")[2].strip() for line in lines if line.strip().startswith("Model name:")]
    return names[0] if names else platform.processor() or platform.machine()


def llama_cpp_system_info() -> str | None:
    """What llama.cpp was built with (AVX2, AVX512, AMX, OpenMP...), as llama.cpp prints it."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip()


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def gpu_names() -> str | None:
    """The NVIDIA GPUs' names, comma-separated, or None without `nvidia-smi` (a CPU machine)."""
    names = output("nvidia-smi", "--query-gpu=name", "--format=csv,noheader", timeout=30) or ""
    return ", ".join(line.strip() for line in names.splitlines() if line.strip()) or None


def machine() -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu_model": cpu_model(), "usable_cores": cores, "logical_cpus": os.cpu_count(),
            "platform": platform.platform(), "llama_cpp_system_info": llama_cpp_system_info(),
            "packages": package_versions()}  # fmt: skip
    gpus = gpu_names()
    return {"gpu": gpus, **info} if gpus else info


def command_line(argv: list[str] | None = None) -> str:
    """The command as run from the repository root (`python -m benchmarks.x ...`), with no local paths."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    if script.suffix == ".py" and script.is_relative_to(REPO):
        parts = script.relative_to(REPO).with_suffix("").parts
        argv[0] = "-m " + ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
    return " ".join(["python", *(local_path_hidden(a) for a in argv)])


def local_path_hidden(argument: str) -> str:
    """An absolute path outside the repository (a fetched checkout, an sdist) as its file name."""
    path = Path(argument)
    if not path.is_absolute() or path.resolve().is_relative_to(REPO):
        return argument
    return f"<{path.name}>"


@dataclass
class Recording:
    """A benchmark run in progress: `Recording.begin("engine")`, measure, `.write(path, ...)`."""

    benchmark: str
    command: str
    started_at: str
    load_1m_start: float | None
    quick: bool = False
    notes: list[str] = field(default_factory=list)
    #: the commit as the run began (work committed while a long run goes on is not what it measured)
    commit: dict[str, Any] = field(default_factory=git_commit)

    @classmethod
    def begin(cls, benchmark: str, quick: bool = False) -> Recording:
        quick = quick or os.environ.get("LLMFLOW_BENCH_QUICK") == "1"
        return cls(benchmark, command_line(), now(), load_average(), quick)

    def write(self, out: Path, *, config: dict[str, Any], samples: Any, summary: dict[str, Any],
              hide: Iterable[str] = ()) -> dict[str, Any]:  # fmt: skip
        """Write the result file and its samples (`write_split`); every string in `hide` (a local
        model path) becomes its file name. Returns the result file's document."""
        info = {**machine(), "load_1m_start": self.load_1m_start, "load_1m_end": load_average()}
        document = {"schema": SCHEMA, "benchmark": self.benchmark, "command": self.command,
                    "quick": self.quick, "commit": self.commit, "started_at": self.started_at,
                    "finished_at": now(), "machine": info, "config": config, "summary": summary,
                    "notes": self.notes, "samples": samples}  # fmt: skip
        text = json.dumps(document, indent=2, default=str)
        for path in hide:
            text = text.replace(str(path), Path(path).name)
        return write_split(out, json.loads(text))


def config_of(args: Any) -> dict[str, Any]:
    """A script's options as its result's config: every path as its file name (no local paths)."""
    return {k: (v.name if isinstance(v, Path) else v) for k, v in vars(args).items()}


def split_samples(document: Any) -> tuple[Any, Any]:
    """(the document without its raw samples, the samples alone in the same nesting; None if none)."""
    if isinstance(document, list):
        parts = [split_samples(item) for item in document]
        kept = [k for k, _ in parts]
        return kept, ([s for _, s in parts] if any(s is not None for _, s in parts) else None)
    if not isinstance(document, dict):
        return document, None
    kept, samples = {}, {}
    for key, value in document.items():
        if key in SAMPLE_KEYS:
            samples[key] = value
            continue
        kept[key], inner = split_samples(value)
        if inner is not None:
            samples[key] = inner
    return kept, samples or None


def write_split(out: Path, document: dict[str, Any]) -> dict[str, Any]:
    """`out` gets the document without raw samples; `raw/` beside it (git-ignored) the samples."""
    kept, samples = split_samples(document)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(kept, indent=2, default=str) + "\n", encoding="utf-8")
    if samples is not None:
        raw = out.parent / "raw" / out.name
        raw.parent.mkdir(exist_ok=True)
        raw.write_text(json.dumps(samples, default=str) + "\n", encoding="utf-8")
    print(f"result: {out}", file=sys.stderr)
    return kept


def bench_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """What server comparisons read from the summary of a `llmflow bench` level."""
    ttft, itl = summary["ttft_s"], summary["itl_s"]
    return {"output_tok_s": summary["output_throughput"], "ttft_p50_s": ttft["median"],
            "ttft_p99_s": ttft["p99"], "itl_p50_s": itl["median"], "itl_p99_s": itl["p99"]}  # fmt: skip


def paired_ratios(numerators: Iterable[float | None], denominators: Iterable[float | None]) -> dict | None:
    """The ratio of two sides measured in the same rounds, round by round: median and min-max."""
    return spread(a / b if a and b else None for a, b in zip(numerators, denominators, strict=True))


def rotated(names: list[str], i: int) -> list[str]:
    """`names` from the `i`-th on, wrapping round: which side goes first rotates round by round."""
    k = i % len(names)
    return names[k:] + names[:k]


def alternated(sides: dict[str, Callable[[], T]], rounds: int, warm_up: bool = True) -> dict[str, list[T]]:
    """Every side's result in each of `rounds` rounds, the first side rotating (`rotated`), after
    one warm-up run each (imports, caches, thread teams)."""
    names = list(sides)
    for name in names if warm_up else ():
        sides[name]()
    results: dict[str, list[T]] = {name: [] for name in names}
    for i in range(rounds):
        for name in rotated(names, i):
            results[name].append(sides[name]())
    return results
