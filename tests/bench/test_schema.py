"""The results schema is stable: its version and fields are pinned here, so changing them is a
deliberate act (bump SCHEMA_VERSION and update these lists)."""

from __future__ import annotations

import jsonschema

from llmflow.bench.schema import LEVEL, REQUEST, RESULTS, SCHEMA_VERSION, SUMMARY


def test_the_schema_is_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(RESULTS)


def test_pinned_version_and_fields():
    assert SCHEMA_VERSION == 2
    assert sorted(RESULTS["properties"]) == [
        "aborted", "config", "levels", "llmflow_version", "notes", "schema_version", "started_at", "target",
        "tool", "warmup",
    ]  # fmt: skip
    assert sorted(LEVEL["properties"]) == ["concurrency", "label", "request_rate", "requests", "summary"]
    assert sorted(SUMMARY["properties"]) == [
        "completed", "duration_s", "e2e_s", "errors", "failed", "itl_s", "output_throughput",
        "output_tokens_sources", "request_throughput", "resent", "total_output_tokens", "total_prompt_tokens",
        "tpot_s", "ttft_s",
    ]  # fmt: skip
    assert sorted(REQUEST["properties"]) == [
        "chunks", "e2e_s", "error", "finish_reason", "index", "itl_s", "ok", "output_tokens",
        "output_tokens_source", "prompt_tokens", "resent", "start_s", "tokenizer_output_tokens", "tpot_s",
        "ttft_s", "usage_output_tokens",
    ]  # fmt: skip
    for part in (RESULTS, LEVEL, SUMMARY, REQUEST):
        assert part["additionalProperties"] is False  # an unknown field fails validation
