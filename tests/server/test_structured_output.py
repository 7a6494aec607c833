"""Structured output over HTTP with the official openai client: `response_format` (json_object,
json_schema) and llmflow's `regex`, `choice` and `grammar`, on chat and text completions,
streamed or not; bad constraints are a 400 naming the field, before any stream starts."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from llmflow.constraints import Constraint
from tests.constraints.schemas import SCHEMAS, accepts_prefix

MESSAGES = [{"role": "user", "content": "Describe a person in JSON."}]


def json_schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


@pytest.mark.parametrize("name", ["object", "nested", "ref", "any_of"])
@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_answers_validate(client, model_name, name, stream):
    schema = SCHEMAS[name]
    kwargs = {"model": model_name, "messages": MESSAGES, "max_tokens": 64, "seed": 5, "temperature": 0.9}
    if stream:
        chunks = list(
            client.chat.completions.create(**kwargs, response_format=json_schema_format(schema), stream=True)
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finish) == 1
        finish_reason = finish[0]
    else:
        answer = client.chat.completions.create(**kwargs, response_format=json_schema_format(schema))
        text, finish_reason = answer.choices[0].message.content, answer.choices[0].finish_reason
    assert finish_reason in ("stop", "length")
    if finish_reason == "stop":
        jsonschema.validate(json.loads(text), schema)


def test_json_object(client, model_name):
    answer = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=96, response_format={"type": "json_object"}, seed=2
    )
    if answer.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(answer.choices[0].message.content), dict)
    else:
        assert answer.choices[0].message.content.startswith("{")


def test_length_leaves_a_prefix(client, model_name, served_llm):
    answer = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=3, response_format=json_schema_format(SCHEMAS["ref"])
    )
    assert answer.choices[0].finish_reason == "length"
    text = answer.choices[0].message.content
    assert accepts_prefix(served_llm.llm, Constraint.json_schema(SCHEMAS["ref"]), text), text


def test_llmflow_extensions_on_both_routes(client, model_name):
    choice = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=8, extra_body={"choice": ["yes", "no"]}
    )
    assert choice.choices[0].message.content in ("yes", "no")
    assert choice.choices[0].finish_reason == "stop"
    regex = client.completions.create(
        model=model_name, prompt="Code: ", max_tokens=12, extra_body={"regex": "[0-9]{4}"}
    )
    assert regex.choices[0].text.isdigit() and len(regex.choices[0].text) == 4
    grammar = client.completions.create(
        model=model_name,
        prompt="Answer: ",
        max_tokens=12,
        stream=True,
        extra_body={"grammar": 'start: "ok" | "not ok"'},
    )
    assert "".join(c.choices[0].text for c in grammar) in ("ok", "not ok")


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        (
            {"response_format": json_schema_format({"type": "object", "if": {}})},
            "response_format.json_schema.schema",
            "if",
        ),
        ({"regex": "[unclosed"}, "regex", "regex"),
        ({"grammar": "start: nowhere"}, "grammar", "nowhere"),
        ({"choice": []}, "choice", "choice"),
        ({"regex": "a", "choice": ["a"]}, "choice", "one output constraint"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema", "schema"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "json"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_constraints_are_400_naming_the_field(client, model_name, extra, param, words, stream):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=model_name, messages=MESSAGES, max_tokens=4, stream=stream, extra_body=extra
        )
    error = raised.value.body
    assert error["param"] == param, error
    assert words in error["message"]


def test_openapi_documents_the_extensions(http):
    spec = http.get("/openapi.json").json()
    fields = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    for name in (
        "response_format",
        "regex",
        "choice",
        "grammar",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    ):
        assert name in fields, name
    assert "llmflow extension" in fields["regex"]["description"]
