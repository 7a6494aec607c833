"""Assertions every benchmark result must satisfy, whatever it ran against."""

from __future__ import annotations

import math

import jsonschema

from llmflow.bench.schema import RESULTS


def check_document(document: dict) -> None:
    """The results follow the schema, and the numbers agree with each other."""
    jsonschema.validate(document, RESULTS)
    for level in document["levels"]:
        requests, summary = level["requests"], level["summary"]
        ok = [r for r in requests if r["ok"]]
        assert summary["completed"] == len(ok)
        assert summary["failed"] == len(requests) - len(ok)
        assert summary["total_output_tokens"] == sum(r["output_tokens"] for r in ok)
        for record in ok:
            check_request(record)


def check_request(record: dict) -> None:
    assert record["start_s"] >= 0
    assert 0 < record["ttft_s"] <= record["e2e_s"]
    assert len(record["itl_s"]) == record["chunks"] - 1  # one gap per text chunk after the first
    assert all(gap >= 0 for gap in record["itl_s"])
    assert math.fsum(record["itl_s"]) <= record["e2e_s"] - record["ttft_s"] + 1e-5
    assert 1 <= record["chunks"] <= record["output_tokens"]  # a chunk holds one token or more
