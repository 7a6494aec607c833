"""An llmflow model logged as an MLflow ResponsesAgent (`interface="responses"`): MLflow's own
signature, input example and output validation; predict and predict_stream with its events."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import mlflow
import pytest
import yaml
from mlflow.exceptions import MlflowException
from mlflow.types.responses import ResponsesAgentResponse, ResponsesAgentStreamEvent
from typer.testing import CliRunner

from llmflow.cli import app
from llmflow.mlflow import find_llm
from llmflow.mlflow.responses_agent import LlmflowResponsesAgent
from tests.mlflow.store import using


@pytest.fixture(scope="session")
def agent(logged_agent, mlflow_store):
    with using(mlflow_store):
        model = mlflow.pyfunc.load_model(logged_agent.model_uri)
    yield model
    find_llm(model).close()


def test_it_is_logged_as_a_responses_agent_with_mlflows_signature(logged_agent, agent, mlflow_store):
    with using(mlflow_store):
        local = mlflow.artifacts.download_artifacts(logged_agent.model_uri)
    mlmodel = yaml.safe_load(Path(local, "MLmodel").read_text())
    assert mlmodel["metadata"]["task"] == "agent/v1/responses"
    flavor = mlmodel["flavors"]["python_function"]
    assert flavor["streamable"] is True
    assert "weights_path" not in flavor["config"]  # the weights travel as the artifact
    assert "model" in flavor["artifacts"]
    signature_inputs = {column["name"] for column in yaml.safe_load(mlmodel["signature"]["inputs"])}
    assert {"input", "custom_inputs", "max_output_tokens", "temperature"} <= signature_inputs
    example = mlflow.models.Model.load(local).load_input_example(local)
    assert example["input"][0]["content"] and example["max_output_tokens"]
    assert isinstance(agent.get_raw_model(), LlmflowResponsesAgent)


def test_predict_answers_a_validated_response_with_usage(agent):
    answer = agent.predict(
        {"input": [{"role": "user", "content": "Say hi."}], "max_output_tokens": 6, "temperature": 0}
    )
    response = ResponsesAgentResponse(**answer)  # MLflow's own validation
    assert response.status in ("completed", "incomplete")
    assert response.usage.output_tokens <= 6 and response.usage.input_tokens > 0
    (item,) = answer["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    if response.status == "incomplete":
        assert response.usage.output_tokens == 6
        assert answer["incomplete_details"] == {"reason": "max_output_tokens"}


def test_predict_stream_yields_validated_events_in_openais_order(agent):
    request = {
        "input": [{"role": "user", "content": "Count: 1, 2, 3,"}],
        "instructions": "Continue the count.",
        "custom_inputs": {"top_k": 1, "seed": 3},
        "max_output_tokens": 8,
    }
    events = list(agent.predict_stream(request))
    for event in events:
        ResponsesAgentStreamEvent(**event)  # MLflow's own validation of each event
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert types[-1] in ("response.completed", "response.incomplete")
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(e["delta"] for e in deltas)
    done = events[-2]["item"]
    assert all(e["item_id"] == done["id"] for e in deltas)
    assert done["content"][0]["text"] == "".join(e["delta"] for e in deltas)
    usage = events[-1]["response"]["usage"]
    assert (
        usage["output_tokens"] <= 8
        and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    )


def test_sampling_params_from_custom_inputs_and_request_fields(agent):
    python_model = agent.get_raw_model()
    request = {
        "input": [{"role": "user", "content": "x"}],
        "temperature": 0.5,
        "top_p": 0.9,
        "custom_inputs": {"top_k": 2, "stop": ["\n"]},
    }
    params = python_model.prepare(request).request.params
    assert (params.temperature, params.top_p, params.top_k, params.stop) == (0.5, 0.9, 2, ("\n",))
    assert params.max_tokens == 12  # the logged default


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        (
            {"input": [{"role": "user", "content": "Hi"}], "custom_inputs": {"top_k": -1}},
            "custom_inputs.top_k",
        ),
        ({"input": [{"role": "user", "content": "Hi"}], "max_output_tokens": 0}, "max_output_tokens"),
        (
            {"input": [{"role": "user", "content": "Hi"}], "custom_inputs": {"bogus": 1}},
            "custom_inputs.bogus",
        ),
        (
            {
                "input": [{"role": "user", "content": "Hi"}],
                "custom_inputs": {"tools": [{"type": "function", "name": "f", "parameters": {"if": {}}}]},
            },
            "custom_inputs.tools[0].parameters",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "", "output": "1"}]},
            "input[0].call_id",
        ),
    ],
)
def test_bad_requests_raise_mlflow_errors_naming_the_field(agent, request_body, field):
    with pytest.raises(MlflowException) as refused:
        agent.predict(request_body)
    assert field in refused.value.message


def test_a_request_that_is_not_a_responses_request_is_refused(agent):
    with pytest.raises((MlflowException, ValueError)):
        agent.predict({"input": "not a list of items", "custom_inputs": 3})


def test_llmflow_log_interface_responses(mlflow_store):
    result = CliRunner().invoke(
        app,
        [
            "log",
            "--interface",
            "responses",
            "--by-reference",
            "--tracking-uri",
            mlflow_store.uri,
            "--param",
            "max_tokens=4",
        ],
    )
    assert result.exit_code == 0, result.output
    uri = result.stdout.strip().splitlines()[-1]
    with using(mlflow_store):
        loaded = mlflow.pyfunc.load_model(uri)
    try:
        assert isinstance(loaded.get_raw_model(), LlmflowResponsesAgent)
        assert loaded.predict({"input": [{"role": "user", "content": "Hi"}]})["usage"]["output_tokens"] <= 4
    finally:
        find_llm(loaded).close()
    bad = CliRunner().invoke(app, ["log", "--interface", "telepathy", "--tracking-uri", mlflow_store.uri])
    assert bad.exit_code == 2 and "interface" in bad.stderr


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Forecast", "parameters": WEATHER}
ASK = [{"role": "user", "content": "Weather in Osaka for 3 days?"}]


def _calls_validate(items: list[dict], status: str) -> list[dict]:
    calls = [item for item in items if item["type"] == "function_call"]
    assert calls and len(calls) == len(items), items
    for call in calls:
        assert call["name"] == "get_weather" and call["call_id"].startswith("call_")
        if call["status"] == "completed":
            jsonschema.validate(json.loads(call["arguments"]), WEATHER)
        else:  # cut by max_output_tokens
            assert status == "incomplete" and call is calls[-1]
    return calls


def test_predict_stream_with_tools_yields_function_call_items_mlflow_validates(agent):
    # the loaded pyfunc model checks requests against MLflow's standard signature, which lets a
    # function tool through with only its `type`: tools go in custom_inputs there
    request = {
        "input": ASK,
        "custom_inputs": {"tools": [WEATHER_TOOL]},
        "tool_choice": "required",
        "max_output_tokens": 160,
    }
    events = list(agent.predict_stream(request))
    for event in events:
        ResponsesAgentStreamEvent(**event)  # MLflow's own validation (output_item.done checks the item)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    response = events[-1]["response"]
    calls = _calls_validate(done, response["status"])
    assert response["output"] == done
    for call in calls:
        deltas = [
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == call["id"]
        ]
        assert "".join(deltas) == call["arguments"]
    assert {e["type"] for e in events} >= {
        "response.output_item.added",
        "response.function_call_arguments.done",
    }
    assert "response.output_text.delta" not in {e["type"] for e in events}


def test_predict_with_a_named_tool_then_its_output(agent):
    python_model = agent.get_raw_model()  # the ResponsesAgent itself: tools in the request's own field
    named = {"type": "function", "name": "get_weather"}
    request = {"input": ASK, "tools": [WEATHER_TOOL], "tool_choice": named, "max_output_tokens": 160}
    first = python_model.predict(request).model_dump(exclude_none=True)
    ResponsesAgentResponse(**first)
    (call,) = _calls_validate(first["output"], first["status"])  # a named function: one call
    conversation = [
        *ASK,
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": '{"forecast": "sunny"}'},
    ]
    second = agent.predict({"input": conversation, "custom_inputs": {"tools": [WEATHER_TOOL]},
                            "max_output_tokens": 24, "tool_choice": "none"})  # fmt: skip
    ResponsesAgentResponse(**second)
    (message,) = second["output"]
    assert message["type"] == "message" and message["content"][0]["text"]


def test_predict_with_a_json_schema_text_format(agent):
    fmt = {"type": "json_schema", "name": "forecast", "schema": WEATHER, "strict": True}
    answer = agent.predict({"input": ASK, "text": {"format": fmt}, "max_output_tokens": 64})
    text = answer["output"][0]["content"][0]["text"]
    if answer["status"] == "completed":
        jsonschema.validate(json.loads(text), WEATHER)
    else:
        assert text.startswith("{")


@pytest.mark.parametrize("where", ["request", "custom_inputs"])
def test_instructions_become_the_system_message(agent, where):
    """MLflow's request model has no `instructions` and drops them silently: a dict request keeps
    them, and a loaded model's predict (MLflow's signature) takes them in custom_inputs."""
    raw = agent.get_raw_model()
    conversation = [{"role": "user", "content": "Say hi."}]
    body = {"input": conversation, "instructions": "Answer in French."}
    if where == "custom_inputs":
        body = {"input": conversation, "custom_inputs": {"instructions": "Answer in French."}}
    prompt = raw.llm.detokenize(raw.prepare(body).request.prompt_ids)
    assert "Answer in French." in prompt and prompt.index("Answer in French.") < prompt.index("Say hi.")
    answer = agent.predict({**body, "max_output_tokens": 4, "temperature": 0})
    assert ResponsesAgentResponse(**answer).usage.input_tokens > 0


def test_instructions_given_twice_are_refused(agent):
    body = {
        "input": [{"role": "user", "content": "Hi"}],
        "instructions": "a",
        "custom_inputs": {"instructions": "b"},
    }
    with pytest.raises(MlflowException, match=r"custom_inputs\.instructions"):
        agent.get_raw_model().prepare(body)
