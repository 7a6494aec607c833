"""Results as a JSON document (schema in `llmflow.bench.schema`), a Markdown table and a PNG
plot. The table and the plot read the JSON document, so results saved earlier (or from
several servers) can be reported together."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmflow import __version__
from llmflow.bench.schema import SCHEMA_VERSION
from llmflow.bench.stats import summarize
from llmflow.bench.sweep import LevelResult, Sweep

#: a labelled results document: (label or None, document)
Run = tuple[str | None, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Target:
    mode: str  # "http" or "in_process"
    url: str | None
    api: str
    model: str | None


@dataclass(frozen=True, slots=True)
class Settings:
    requests: list[int]
    prompt_tokens: int | None
    max_tokens: int
    dataset: str | None
    temperature: float
    seed: int
    tokenizer: str | None
    request_usage: bool
    warmup: bool
    timeout_s: float | None


def build_document(
    sweep: Sweep, target: Target, settings: Settings, notes: Sequence[str], started_at: dt.datetime
) -> dict[str, Any]:
    warmup = sweep.warmup
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "llmflow bench",
        "llmflow_version": __version__,
        "started_at": started_at.astimezone(dt.timezone.utc).isoformat(timespec="seconds"),
        "target": asdict(target),
        "config": asdict(settings),
        "notes": list(notes),
        "aborted": sweep.aborted,
        "warmup": warmup.to_dict(warmup.sent_at) if warmup is not None else None,
        "levels": [_level(result) for result in sweep.levels],
    }


def _level(result: LevelResult) -> dict[str, Any]:
    level = result.level
    rate: float | str | None = level.request_rate
    if rate is not None and math.isinf(rate):
        rate = "inf"
    records = sorted(result.records, key=lambda r: r.index)
    return {
        "label": level.label,
        "concurrency": level.concurrency,
        "request_rate": rate,
        "summary": summarize(records, result.duration_s),
        "requests": [r.to_dict(result.started_at) for r in records],
    }


def write_json(document: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")


_COLUMNS = (
    ("ok", lambda s: str(s["completed"])),
    ("failed", lambda s: str(s["failed"])),
    ("req/s", lambda s: _num(s["request_throughput"], 2)),
    ("output tok/s", lambda s: _num(s["output_throughput"], 1)),
    ("TTFT median ms", lambda s: _ms(s["ttft_s"], "median")),
    ("TTFT p99 ms", lambda s: _ms(s["ttft_s"], "p99")),
    ("ITL median ms", lambda s: _ms(s["itl_s"], "median")),
    ("ITL p99 ms", lambda s: _ms(s["itl_s"], "p99")),
    ("TPOT median ms", lambda s: _ms(s["tpot_s"], "median")),
    ("E2E median s", lambda s: _sec(s["e2e_s"], "median")),
    ("E2E p99 s", lambda s: _sec(s["e2e_s"], "p99")),
)


def markdown_table(runs: Sequence[Run]) -> str:
    """One row per (run, level); a first column names the run when there are several."""
    labelled = len(runs) > 1 or any(label for label, _ in runs)
    head = (["server"] if labelled else []) + ["load"] + [name for name, _ in _COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for level_rows in _interleaved(runs):
        for label, level in level_rows:
            cells = ([label or ""] if labelled else []) + [_load(level)]
            cells += [render(level["summary"]) for _, render in _COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _interleaved(runs: Sequence[Run]) -> list[list[tuple[str | None, dict[str, Any]]]]:
    """Rows grouped by load level so that runs compare line by line."""
    longest = max((len(doc["levels"]) for _, doc in runs), default=0)
    return [
        [(label, doc["levels"][i]) for label, doc in runs if i < len(doc["levels"])] for i in range(longest)
    ]


def _load(level: dict[str, Any]) -> str:
    if level["request_rate"] is None:
        return f"c={level['concurrency']}"
    return f"{level['request_rate']}/s"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ms(distribution: dict[str, float] | None, key: str) -> str:
    return "-" if distribution is None else f"{distribution[key] * 1000:.1f}"


def _sec(distribution: dict[str, float] | None, key: str) -> str:
    return "-" if distribution is None else f"{distribution[key]:.2f}"


def plot(runs: Sequence[Run], path: Path, title: str = "llmflow bench") -> None:
    """Throughput and latencies against the load level, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("output tokens/s", "output_throughput", None, 1.0),
        ("TTFT (ms)", "ttft_s", "median", 1000.0),
        ("ITL (ms)", "itl_s", "median", 1000.0),
        ("E2E latency (s)", "e2e_s", "median", 1.0),
    )
    figure, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for axis, (name, key, stat, scale) in zip(axes.flat, panels, strict=True):
        for label, doc in runs:
            xs, ys, p99 = _series(doc, key, stat, scale)
            if not xs:
                continue
            (line,) = axis.plot(xs, ys, marker="o", label=f"{label or 'median'}")
            if p99:
                axis.plot(xs, p99, linestyle="--", color=line.get_color(), alpha=0.6)
        axis.set_title(name + ("" if stat is None else " — median, p99 dashed"))
        axis.set_xlabel(_x_label(runs))
        _integer_log2_ticks(axis, runs)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        if len(runs) > 1:
            axis.legend()
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _series(doc: dict[str, Any], key: str, stat: str | None, scale: float):
    xs, ys, p99 = [], [], []
    for level in doc["levels"]:
        x = level["concurrency"] if level["request_rate"] is None else level["request_rate"]
        value = level["summary"][key]
        if x is None or x == "inf" or value is None:
            continue
        xs.append(x)
        if stat is None:
            ys.append(value * scale)
        else:
            ys.append(value[stat] * scale)
            p99.append(value["p99"] * scale)
    return xs, ys, p99


def _x_label(runs: Sequence[Run]) -> str:
    closed = all(level["request_rate"] is None for _, doc in runs for level in doc["levels"])
    return "concurrent requests" if closed else "request rate (requests/s)"


def _integer_log2_ticks(axis, runs: Sequence[Run]) -> None:
    """Concurrency levels usually double: a log2 axis with the levels themselves as ticks."""
    xs = sorted(
        {level["concurrency"] for _, doc in runs for level in doc["levels"] if level["request_rate"] is None}
        - {None}
    )
    if len(xs) < 2 or xs[0] < 1:
        return
    axis.set_xscale("log", base=2)
    axis.set_xticks(xs, [str(x) for x in xs])
    axis.minorticks_off()
