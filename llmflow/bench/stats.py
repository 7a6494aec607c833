"""Summary statistics of one load level, over the requests that succeeded (as vLLM's benchmark
does); failed requests are counted, and kept in the per-request records."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmflow.bench.records import RequestRecord


@dataclass(frozen=True, slots=True)
class Distribution:
    mean: float
    median: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            mean=math.fsum(ordered) / len(ordered),
            median=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
        )

    def to_dict(self) -> dict[str, float]:
        return {name: round(getattr(self, name), 6) for name in ("mean", "median", "p90", "p99")}


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(records: Sequence[RequestRecord], duration_s: float) -> dict[str, Any]:
    """The `summary` object of a level in the JSON results."""
    ok = [r for r in records if r.ok]
    tokens = [r.output_tokens[0] or 0 for r in ok]
    prompt_tokens = [p for p in (_prompt_tokens(r) for r in ok) if p is not None]
    sources = Counter(source.value for _, source in (r.output_tokens for r in ok) if source is not None)
    errors = Counter(r.error.kind.value for r in records if r.error is not None)
    return {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "resent": sum(r.resent for r in records),
        "duration_s": round(duration_s, 6),
        "request_throughput": _rate(len(ok), duration_s),
        "output_throughput": _rate(sum(tokens), duration_s),
        "total_output_tokens": sum(tokens),
        "total_prompt_tokens": sum(prompt_tokens) if len(prompt_tokens) == len(ok) else None,
        "output_tokens_sources": dict(sorted(sources.items())),
        "errors": dict(sorted(errors.items())),
        "ttft_s": _dist([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": _dist([gap for r in ok for gap in r.itl_s]),
        "tpot_s": _dist([r.tpot_s for r in ok if r.tpot_s is not None]),
        "e2e_s": _dist([r.e2e_s for r in ok if r.e2e_s is not None]),
    }


def _prompt_tokens(record: RequestRecord) -> int | None:
    if record.usage_prompt_tokens is not None:
        return record.usage_prompt_tokens
    return record.spec_prompt_tokens


def _dist(values: list[float]) -> dict[str, float] | None:
    distribution = Distribution.of(values)
    return distribution.to_dict() if distribution else None


def _rate(count: int, duration_s: float) -> float | None:
    return round(count / duration_s, 6) if duration_s > 0 else None
