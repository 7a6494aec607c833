"""`ignore_eos` (a benchmark option of both llama.cpp engines): every answer runs to max_tokens,
and an output constraint still ends its text where the constraint completes."""

from __future__ import annotations

import pytest

from llmflow import LLM
from llmflow.constraints import Constraint
from llmflow.types import FinishReason


@pytest.fixture(scope="module", params=["llama_cpp", "llama_cpp_batched"])
def llm(request):
    loaded = LLM.load(engine=request.param, engine_options={"n_ctx": 512, "ignore_eos": True})
    yield loaded
    loaded.close()


def test_every_answer_runs_to_max_tokens(llm):
    for seed in range(3):
        done = llm.generate("Say hi.", {"max_tokens": 40, "temperature": 1.0, "seed": seed})
        assert (done.usage.completion_tokens, done.finish_reason) == (40, FinishReason.LENGTH)


def test_a_completed_constraint_adds_no_text(llm):
    done = llm.generate("Is the sky blue?", {"max_tokens": 12}, constraint=Constraint.choice(["yes", "no"]))
    assert done.text in ("yes", "no")
    assert (done.usage.completion_tokens, done.finish_reason) == (12, FinishReason.LENGTH)
