"""Logprobs from a row of logits (no model): what `scored` and `top_ids` compute."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow.engines.logprobs import scored, top_ids


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 5000), top=st.integers(1, 20), seed=st.integers(0, 2**16), coarse=st.booleans())
def test_top_ids_are_the_largest_values_in_order(size, top, seed, coarse):
    row = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    if coarse:  # many ties
        row = np.round(row, 1)
    top = min(top, size)
    expected = np.sort(row)[::-1][:top]
    assert np.array_equal(row[top_ids(row, top)], expected)


@pytest.mark.parametrize("top", [0, 1, 5, 20])
def test_scored_is_a_log_softmax(top):
    row = np.random.default_rng(1).standard_normal(49152).astype(np.float32) * 4
    token = int(row.argmin())
    result = scored(token, row, top)
    log_total = math.log(np.exp(row.astype(np.float64)).sum())

    assert int(result) == token and result.logprob == pytest.approx(float(row[token]) - log_total, abs=1e-4)
    assert len(result.top) == top
    assert [i for i, _ in result.top] == [int(i) for i in np.argsort(-row)[:top]]
    for i, logprob in result.top:
        assert logprob == pytest.approx(float(row[i]) - log_total, abs=1e-4)
