"""In-process mode: `llm.stream` timed in worker threads, no HTTP."""

from __future__ import annotations

import pytest

from llmflow.bench import BenchOptions, run_bench
from llmflow.model_files import default_model_path
from tests.bench.checks import check_document

MAX_TOKENS = 10
#: one llama.cpp thread: on a busy 2-core machine more threads wait on each other
ENGINE = {"n_threads": 1}


def test_in_process_sweep_is_consistent():
    options = BenchOptions(
        model=str(default_model_path()),
        concurrency=(1, 2),
        requests=2,
        max_tokens=MAX_TOKENS,
        prompt_tokens=12,
        engine_options=ENGINE,
    )
    document = run_bench(options)
    check_document(document)
    assert document["target"] == {
        "mode": "in_process",
        "url": None,
        "api": "chat",
        "model": str(default_model_path()),
    }
    for level in document["levels"]:
        assert level["summary"]["output_tokens_sources"] == {"usage": 2}
        for record in level["requests"]:
            assert record["usage_output_tokens"] == record["output_tokens"] <= MAX_TOKENS
            assert record["prompt_tokens"] > 12  # usage: the chat template's tokens too
            if record["finish_reason"] == "length":
                # tokens counted by re-tokenizing the answer == usage == one text chunk per token
                assert record["tokenizer_output_tokens"] == record["usage_output_tokens"] == MAX_TOKENS
                assert record["chunks"] == MAX_TOKENS and len(record["itl_s"]) == MAX_TOKENS - 1


def test_request_rate_mode():
    options = BenchOptions(
        request_rates=(50.0, float("inf")), requests=3, max_tokens=4, prompt_tokens=8, engine_options=ENGINE
    )
    document = run_bench(options)
    check_document(document)
    assert [level["request_rate"] for level in document["levels"]] == [50.0, "inf"]
    assert [level["label"] for level in document["levels"]] == ["rate 50/s", "rate inf/s"]
    assert all(level["summary"]["completed"] == 3 for level in document["levels"])


def test_a_saved_mlflow_model(tmp_path):
    """An MLflow model directory (or URI) runs through `mlflow.pyfunc.load_model` and the LLM
    inside it."""
    import llmflow.mlflow

    path = tmp_path / "model"
    llmflow.mlflow.save_model(path, engine_options=ENGINE, by_reference=True)
    document = run_bench(
        BenchOptions(model=str(path), concurrency=(1,), requests=1, max_tokens=4, warmup=False)
    )
    check_document(document)
    assert document["target"]["model"] == str(path)
    assert document["levels"][0]["summary"]["completed"] == 1


def test_a_model_that_is_not_llmflow(tmp_path):
    import mlflow.pyfunc

    from llmflow.errors import InvalidRequest

    class Echo(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input: list[str], params=None) -> list[str]:
            return model_input

    mlflow.pyfunc.save_model(tmp_path / "echo", python_model=Echo())
    with pytest.raises(InvalidRequest, match="is not an llmflow model"):
        run_bench(BenchOptions(model=str(tmp_path / "echo"), concurrency=(1,), requests=1))


def test_concurrent_requests_get_the_batching_engine():
    """Above concurrency 1 a GGUF model loads as `llmflow serve` loads it (the batching engine),
    so that in-process and served runs of one workload differ by serving alone."""
    from llmflow.bench.inprocess import load_llm
    from llmflow.engines.llama_cpp import LlamaCppEngine
    from llmflow.engines.llama_cpp_batched import LlamaCppBatchedEngine

    for concurrent, kind in ((False, LlamaCppEngine), (True, LlamaCppBatchedEngine)):
        llm = load_llm(str(default_model_path()), ENGINE, concurrent=concurrent)
        try:
            assert type(llm.engine) is kind
        finally:
            llm.close()
