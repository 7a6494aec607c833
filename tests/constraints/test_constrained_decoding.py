"""Constrained decoding on the real embedded model, on both llama.cpp engines: whatever the seed
and temperature, a finished answer validates; an answer cut at max_tokens is a prefix the
constraint accepts; greedy takes the masked argmax; compilation is cached and bad constraints
fail before any token, naming their field."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmflow import LLM
from llmflow.constraints import Constraint
from llmflow.errors import InvalidConstraint, InvalidRequest
from llmflow.types import FinishReason
from tests.constraints.schemas import PROMPT, SCHEMAS, accepts_prefix


@pytest.fixture(scope="module", params=["llama_cpp", "llama_cpp_batched"])
def llm(request, embedded_llm):
    if request.param == "llama_cpp":
        yield embedded_llm
        return
    batched = LLM.load(engine="llama_cpp_batched", engine_options={"n_ctx": 1024, "parallel": 8})
    yield batched
    batched.close()


def check_answer(llm: LLM, schema: dict[str, Any], text: str, finish: FinishReason) -> None:
    if finish is FinishReason.STOP:
        jsonschema.validate(json.loads(text), schema)
    else:
        assert finish is FinishReason.LENGTH
        assert accepts_prefix(llm, Constraint.json_schema(schema), text), text


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(SCHEMAS)),
    seed=st.integers(0, 2**32 - 1),
    temperature=st.sampled_from([0.0, 0.7, 1.5]),
)
def test_every_answer_validates(llm, name, seed, temperature):
    schema = SCHEMAS[name]
    params = {"max_tokens": 48, "seed": seed, "temperature": temperature}
    done = llm.generate(PROMPT, params, constraint=Constraint.json_schema(schema))
    check_answer(llm, schema, done.text, done.finish_reason)


def test_a_cut_answer_is_a_valid_prefix(llm):
    schema = SCHEMAS["ref"]
    done = llm.generate(PROMPT, {"max_tokens": 5, "seed": 1}, constraint=Constraint.json_schema(schema))
    assert done.finish_reason is FinishReason.LENGTH
    assert done.usage.completion_tokens == 5
    assert accepts_prefix(llm, Constraint.json_schema(schema), done.text)
    assert not accepts_prefix(llm, Constraint.json_schema(schema), done.text + "]]")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regex_choice_and_grammar(llm, temperature):
    params = {"max_tokens": 24, "temperature": temperature, "seed": 7}
    choice = llm.generate("Is the sky blue?", params, constraint=Constraint.choice(["yes", "no"]))
    assert choice.text in ("yes", "no") and choice.finish_reason is FinishReason.STOP
    code = llm.generate("A code:", params, constraint=Constraint.regex(r"[A-Z]{2}[0-9]{3}"))
    assert len(code.text) == 5 and code.text[:2].isupper() and code.text[2:].isdigit()
    gbnf = 'root ::= "The answer is " ("yes" | "no") "."'
    grammar = llm.generate("Well?", params, constraint=Constraint.grammar(gbnf))
    assert grammar.text in ("The answer is yes.", "The answer is no.")


def test_eight_sequences_eight_schemas_in_one_batch():
    """Each sequence of the batching engine has its own constraint state."""
    llm = LLM.load(engine="llama_cpp_batched", engine_options={"n_ctx": 512, "parallel": 8})
    try:
        names = sorted(SCHEMAS)
        assert len(names) == 8
        results: dict[str, Any] = {}
        barrier = threading.Barrier(8)

        def run(name: str) -> None:
            barrier.wait()
            params = {"max_tokens": 40, "seed": 3, "temperature": 0.8}
            results[name] = llm.generate(PROMPT, params, constraint=Constraint.json_schema(SCHEMAS[name]))

        threads = [threading.Thread(target=run, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert sorted(results) == names
        for name, done in results.items():
            check_answer(llm, SCHEMAS[name], done.text, done.finish_reason)
        assert llm.engine.stats().steps > 0
    finally:
        llm.close()


def test_compilation_is_cached(llm):
    first = llm.compile(Constraint.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}))
    again = llm.compile(
        Constraint.json_schema('{"properties": {"a": {"type": "integer"}}, "type": "object"}')
    )
    assert again is first  # the same schema, written differently


@pytest.mark.parametrize(
    ("constraint", "field", "names"),
    [
        (
            Constraint.json_schema({"type": "object", "if": {"required": ["a"]}}, "json_schema"),
            "json_schema",
            "if",
        ),
        (Constraint.regex("[a-", "regex"), "regex", "regex"),
        (Constraint.grammar("start: undefined_rule", "grammar"), "grammar", "undefined_rule"),
    ],
)
def test_bad_constraints_fail_before_any_token(llm, constraint, field, names):
    with pytest.raises(InvalidConstraint) as raised:
        llm.stream(PROMPT, {"max_tokens": 8}, constraint=constraint)
    assert raised.value.param == field
    assert names in str(raised.value)


def test_bad_constraint_values():
    with pytest.raises(InvalidRequest, match="choice"):
        Constraint.choice([])
    with pytest.raises(InvalidRequest, match="json_schema"):
        Constraint.json_schema("{not json")
    with pytest.raises(InvalidRequest, match="regex"):
        Constraint.regex("")
