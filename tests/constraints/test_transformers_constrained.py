"""Constrained decoding on the transformers engine (CPU, llmflow's own decode loop): a tiny random
Llama writes only what the constraint accepts, whatever the seed."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.extras import missing

pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmflow import LLM, FinishReason
from llmflow.constraints import Constraint
from llmflow.errors import InvalidRequest
from tests.constraints.schemas import PROMPT, SCHEMAS
from tests.fakes.hf_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-hf") / "tiny")


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    llm = LLM.load(tiny_dir)
    yield llm
    llm.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(SCHEMAS)), seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 1.0])
)
def test_every_finished_answer_validates(tiny, name, seed, temperature):
    schema = SCHEMAS[name]
    params = {"max_tokens": 64, "seed": seed, "temperature": temperature}
    done = tiny.generate(PROMPT, params, constraint=Constraint.json_schema(schema))
    if done.finish_reason is FinishReason.STOP:
        jsonschema.validate(json.loads(done.text), schema)
    else:
        matcher = tiny.compile(Constraint.json_schema(schema)).start()
        for token in tiny.engine.token_vocabulary().encode(done.text.encode()):
            matcher.advance(token)  # raises if the text is not an accepted prefix


def test_choice(tiny):
    done = tiny.generate(
        PROMPT, {"max_tokens": 16, "seed": 1}, constraint=Constraint.choice(["alpha", "beta"])
    )
    assert done.text in ("alpha", "beta") and done.finish_reason is FinishReason.STOP


def test_continuous_batching_refuses_constraints(tiny_dir):
    llm = LLM.load(tiny_dir, engine_options={"continuous_batching": True, "max_concurrency": 2})
    try:
        with pytest.raises(InvalidRequest, match="cannot constrain its output"):
            llm.stream(PROMPT, {"max_tokens": 4}, constraint=Constraint.choice(["a"]))
    finally:
        llm.close()
