"""Structured output through the MLflow model: the same constraints as params (`json_schema` as
JSON text, `regex`, `choice` as a list, `tools` as JSON text, `tool_choice`), checked by MLflow's
ParamSchema; `predict` details carry the parsed object and tool calls; the final stream chunk
carries tool calls; a logged default `json_schema` applies when a call gives none."""

from __future__ import annotations

import json

import jsonschema
import mlflow
import pytest
from mlflow.exceptions import MlflowException

import llmflow.mlflow
from tests.constraints.schemas import SCHEMAS
from tests.mlflow.store import using

PERSON = SCHEMAS["object"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "days": {"type": "integer", "minimum": 1},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    }
]


def test_predict_details_return_the_parsed_object(loaded):
    params = {
        "json_schema": json.dumps(PERSON),
        "details": True,
        "max_tokens": 48,
        "temperature": 0.7,
        "seed": 3,
    }
    [answer] = loaded.predict({"prompt": "Describe a person."}, params=params)
    if answer["finish_reason"] == "stop":
        jsonschema.validate(answer["parsed"], PERSON)
        assert answer["parsed"] == json.loads(answer["content"])
    else:
        assert "parsed" not in answer


def test_choice_and_regex_params(loaded):
    answers = loaded.predict(
        [{"prompt": "Is water wet?"}, {"prompt": "Is fire cold?"}],
        params={"choice": ["yes", "no"], "max_tokens": 4},
    )
    assert all(a in ("yes", "no") for a in answers)
    [code] = loaded.predict({"prompt": "A number:"}, params={"regex": "[0-9]{3}", "max_tokens": 8})
    assert code.isdigit() and len(code) == 3


def test_stream_final_chunk_carries_tool_calls(loaded):
    params = {"tools": json.dumps(TOOLS), "tool_choice": "required", "max_tokens": 96, "seed": 1}
    chunks = list(loaded.predict_stream({"prompt": "Weather in Kyoto for 2 days?"}, params=params))
    final = chunks[-1]
    assert all(set(c) == {"content"} for c in chunks[:-1])
    assert "".join(c["content"] for c in chunks[:-1]) == ""  # the call is not content
    if final["finish_reason"] == "length":
        return
    assert final["finish_reason"] == "tool_calls"
    assert final["tool_calls"]  # one call or several: the model's own (greedy) choice
    for call in final["tool_calls"]:
        assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["function"]["arguments"]), TOOLS[0]["function"]["parameters"])


def test_named_tool_choice_in_predict_details(loaded):
    params = {"tools": json.dumps(TOOLS), "tool_choice": "get_weather", "max_tokens": 96, "details": True}
    [answer] = loaded.predict({"messages": [{"role": "user", "content": "Weather in Nara?"}]}, params=params)
    if answer["finish_reason"] == "tool_calls":
        assert answer["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"json_schema": "{not json"}, "json_schema"),
        ({"json_schema": json.dumps({"type": "object", "if": {}})}, "if"),
        ({"regex": "[x", "choice": ["a"]}, "choice"),
        (
            {"tools": json.dumps([{"type": "function", "function": {"name": "bad name"}}])},
            "tools[0].function.name",
        ),
        ({"tools": json.dumps(TOOLS), "tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_bad_output_params_are_refused_before_any_token(loaded, params, words):
    with pytest.raises(MlflowException, match=words.replace("[", r"\[").replace("]", r"\]")):
        next(loaded.predict_stream({"prompt": "Hi"}, params=params))  # MLflow's wrapper is lazy


def test_a_logged_default_json_schema(tracking):
    with mlflow.start_run(experiment_id=tracking.experiment_id):
        info = llmflow.mlflow.log_model(
            "model", default_params={"json_schema": json.dumps(SCHEMAS["enum"]), "max_tokens": 8}
        )
    with using(tracking):
        model = mlflow.pyfunc.load_model(info.model_uri)
    try:
        [answer] = model.predict({"prompt": "A colour?"})
        assert answer in ('"red"', '"green"', '"blue"')
        [free] = model.predict({"prompt": "A colour?"}, params={"json_schema": "", "max_tokens": 4})
        assert isinstance(free, str)
    finally:
        llmflow.mlflow.find_llm(model).close()
