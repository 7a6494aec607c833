"""Workloads: synthetic prompts of an exact token length, reproducible; JSONL datasets."""

from __future__ import annotations

import json

import pytest

from llmflow.bench.tokens import TokenCounter, guess_tokenizer
from llmflow.bench.workload import INSTRUCTION, dataset_requests, synthetic_requests
from llmflow.errors import InvalidRequest
from llmflow.model_files import default_model_path


@pytest.fixture(scope="module")
def counter(embedded_llm):
    return TokenCounter.from_llm(embedded_llm)


def test_the_counter_leaves_out_bos(counter, embedded_llm):
    text = "Hello world, how are you?"
    assert counter.count(text) == len(embedded_llm.engine.tokenize(text)) - counter._overhead
    assert counter.count("") == 0


@pytest.mark.parametrize("target", [1, 5, 16, 100, 300])
def test_synthetic_prompts_have_the_asked_token_count(counter, target):
    specs = synthetic_requests(4, prompt_tokens=target, max_tokens=8, seed=1, key="c1", counter=counter)
    for spec in specs:
        assert spec.prompt_tokens == counter.count(spec.prompt)
        assert target - 2 <= spec.prompt_tokens <= max(target, 1)
    assert len({s.prompt for s in specs}) == 4  # every request different: no prompt cache helps
    if target >= 16:
        assert specs[0].prompt.endswith(INSTRUCTION)


def test_synthetic_prompts_are_reproducible_per_seed_and_level(counter):
    def make(seed, key):
        return [
            s.prompt
            for s in synthetic_requests(3, prompt_tokens=20, max_tokens=8, seed=seed, key=key, counter=None)
        ]

    assert make(0, "c1") == make(0, "c1")
    assert make(0, "c1") != make(1, "c1")
    assert make(0, "c1") != make(0, "c2")


def test_dataset_cycles_and_takes_its_own_max_tokens(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "Say hi."}, {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    specs = dataset_requests(path, 3, max_tokens=9)
    assert [s.max_tokens for s in specs] == [9, 5, 9]
    assert specs[1].as_messages() == [{"role": "user", "content": "Hello"}]
    assert specs[2].prompt == "Say hi."


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "has no requests"),
        ('{"prompt": "ok"}\n{oops\n', "line 2 is not JSON"),
        ("[1]\n", "line 1 is not a JSON object"),
        ('{"text": "x"}\n', 'needs "prompt"'),
        ('{"messages": [{"role": "user"}]}\n', 'needs "prompt"'),
    ],
)
def test_bad_datasets(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InvalidRequest, match=match):
        dataset_requests(path, 1, max_tokens=4)


def test_missing_dataset(tmp_path):
    with pytest.raises(InvalidRequest, match="cannot read"):
        dataset_requests(tmp_path / "nope.jsonl", 1, max_tokens=4)


def test_guess_tokenizer():
    assert guess_tokenizer(str(default_model_path())) == str(default_model_path())
    assert guess_tokenizer("SmolLM2-135M-Instruct.Q4_1") == "embedded"
    assert guess_tokenizer("gpt-4o") is None
    assert guess_tokenizer(None) is None
