"""Short versions of `benchmarks/soak_disconnect.py` and `benchmarks/load_test.py`, with the same
checks as the full runs."""

from __future__ import annotations

import load_test
import pytest
import soak_disconnect


@pytest.mark.timeout(600)
def test_disconnect_soak_loses_nothing():
    args = ["--streams", "60", "--clients", "4", "--max-tokens", "16", "--prefill-words", "150"]
    result = soak_disconnect.main([*args, "--warmup", "3", "--time-limit", "240"])
    assert not result.errors
    assert result.running_after == 0 and result.waiting_after == 0
    assert result.busy_sequences_after == 0  # every cut stream freed its sequence
    assert result.rss_growth < soak_disconnect.RSS_LIMIT
    assert result.answers_after
    assert result.tokens_after_cut_per_cut <= 2.0
    assert result.ok


@pytest.mark.timeout(600)
def test_load_with_a_bounded_queue():
    result = load_test.main(["--clients", "32", "--duration", "20", "--max-queue", "4", "--max-tokens", "12"])
    assert result.server_errors == 0
    assert result.broken_streams == 0
    assert result.refused_without_retry_after == 0
    assert sum(result.refused.values()) > 0  # 32 clients against `parallel` places + 4 waiting
    assert result.ok_streams > 0
    assert result.busy_sequences_after == 0
