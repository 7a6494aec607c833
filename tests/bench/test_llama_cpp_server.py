"""Against llama-cpp-python's own OpenAI server, which streams without usage: output tokens
come from the model's tokenizer, found from the model name the server lists."""

from __future__ import annotations

from llmflow.bench import BenchOptions, run_bench
from tests.bench.checks import check_document

MAX_TOKENS = 12


def test_a_sweep_is_consistent(llama_cpp_server):
    document = run_bench(
        BenchOptions(
            url=llama_cpp_server, concurrency=(1, 2), requests=2, max_tokens=MAX_TOKENS, prompt_tokens=16
        )
    )
    check_document(document)
    assert document["aborted"] is None
    assert [level["concurrency"] for level in document["levels"]] == [1, 2]
    assert document["config"]["tokenizer"].endswith(".gguf")
    assert any("counted with" in note for note in document["notes"])
    for level in document["levels"]:
        assert level["summary"]["completed"] == 2
        for record in level["requests"]:
            assert record["output_tokens_source"] == "tokenizer"
            assert record["usage_output_tokens"] is None
            if record["finish_reason"] == "length":
                assert record["output_tokens"] == MAX_TOKENS  # re-tokenized answer == tokens generated


def test_completions_api(llama_cpp_server, tmp_path):
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "Once upon a time, in a small village, there lived"}\n')
    options = BenchOptions(
        url=llama_cpp_server, api="completions", concurrency=(1,), requests=1, max_tokens=6, dataset=dataset
    )
    document = run_bench(options)
    check_document(document)
    assert document["target"]["url"].endswith("/v1/completions")
    assert document["config"]["dataset"] == "prompts.jsonl"
    assert document["levels"][0]["summary"]["completed"] == 1
