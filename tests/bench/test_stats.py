"""Percentiles and level summaries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmflow.bench.records import ErrorKind, RequestRecord
from llmflow.bench.stats import Distribution, percentile, summarize


@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_match_numpy(values):
    ordered = sorted(values)
    for q in (50, 90, 99):
        assert percentile(ordered, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-9)


def test_no_values_no_distribution():
    assert Distribution.of([]) is None


def record(index: int, arrivals: list[float], end: float, tokens: int | None = None) -> RequestRecord:
    r = RequestRecord(index, sent_at=0.0, ended_at=end, arrivals=arrivals, parts=["x"] * len(arrivals))
    r.usage_output_tokens = tokens
    return r


def test_summary_counts_successes_and_keeps_failures_out_of_latencies():
    good = record(0, [0.5, 0.6, 0.8], end=1.0, tokens=4)
    failed = record(1, [0.1], end=9.0)
    failed.fail(ErrorKind.MALFORMED_SSE, "garbage")
    summary = summarize([good, failed], duration_s=2.0)
    assert summary["completed"] == 1 and summary["failed"] == 1
    assert summary["errors"] == {"malformed_sse": 1}
    assert summary["request_throughput"] == 0.5
    assert summary["output_throughput"] == 2.0  # 4 tokens (usage) in 2 s
    assert summary["ttft_s"]["median"] == 0.5
    assert summary["itl_s"]["mean"] == pytest.approx(0.15, abs=1e-6)
    assert summary["tpot_s"]["mean"] == pytest.approx((1.0 - 0.5) / 3, abs=1e-6)
    assert summary["e2e_s"]["p99"] == 1.0
    assert summary["output_tokens_sources"] == {"usage": 1}


def test_output_tokens_fall_back_from_usage_to_tokenizer_to_chunks():
    r = record(0, [0.1, 0.2], end=0.3)
    assert r.output_tokens == (2, "chunks")
    r.tokenizer_output_tokens = 3
    assert r.output_tokens == (3, "tokenizer")
    r.usage_output_tokens = 4
    assert r.output_tokens == (4, "usage")
