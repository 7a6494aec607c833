"""Against a real `llmflow serve`: the numbers agree with each other and with the server's usage."""

from __future__ import annotations

import pytest

from llmflow.bench import BenchOptions, run_bench
from tests.bench.checks import check_document

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def with_usage(llmflow_server):
    options = BenchOptions(
        url=llmflow_server, concurrency=(1, 2), requests=2, max_tokens=MAX_TOKENS, prompt_tokens=16
    )
    return run_bench(options)


def records(document: dict) -> list[dict]:
    return [r for level in document["levels"] for r in level["requests"]]


def test_the_sweep_is_consistent(with_usage):
    check_document(with_usage)
    assert with_usage["aborted"] is None
    assert with_usage["target"]["model"] == "SmolLM2-135M-Instruct.Q4_1"  # from /v1/models
    assert with_usage["config"]["tokenizer"] == "embedded"  # guessed from the model name
    assert [level["summary"]["completed"] for level in with_usage["levels"]] == [2, 2]


def test_tokens_counted_equal_usage(with_usage):
    for record in records(with_usage):
        assert record["output_tokens_source"] == "usage"
        usage, counted = record["usage_output_tokens"], record["tokenizer_output_tokens"]
        if record["finish_reason"] == "length":
            assert usage == counted == MAX_TOKENS
        else:  # llmflow's usage counts the end-of-generation token, which has no text
            assert usage - counted in (0, 1)
        assert record["prompt_tokens"] > 16  # usage: with the chat template's tokens


def test_one_gap_per_token_after_the_first(with_usage):
    """llmflow sends one SSE chunk per text delta. In English text without stop strings every
    token is a delta of its own, so the chunk gaps are the token gaps: ITL count == tokens - 1."""
    for record in records(with_usage):
        if record["finish_reason"] == "length":
            assert record["chunks"] == record["output_tokens"]
            assert len(record["itl_s"]) == record["output_tokens"] - 1


def test_without_usage_the_tokenizer_counts_the_same(llmflow_server, with_usage):
    """Same seed, same prompts, greedy: asking for no usage makes the benchmark re-tokenize the
    answers, and it arrives at the same counts."""
    options = BenchOptions(
        url=llmflow_server,
        concurrency=(1, 2),
        requests=2,
        max_tokens=MAX_TOKENS,
        prompt_tokens=16,
        request_usage=False,
        warmup=False,
    )
    without = run_bench(options)
    check_document(without)
    assert {r["output_tokens_source"] for r in records(without)} == {"tokenizer"}
    for a, b in zip(records(with_usage), records(without), strict=True):
        if a["finish_reason"] == "length":
            assert a["output_tokens"] == b["output_tokens"]
