"""Function calling and structured output on POST /v1/responses, with the official client and the
OpenAI Agents SDK, on the embedded model (a template without tool support: llmflow's generic
format). `required` and a named `tool_choice` always give `function_call` items whose arguments
validate; streamed argument deltas join to the arguments of `response.function_call_arguments.done`
and of the item; a call's output goes back as a `function_call_output` item; `text.format`
json_schema answers validate; bad tools are a 400 naming the field.

How many calls the model makes and what it writes are its greedy choices, which differ between
llama.cpp builds: the tests check what decoding guarantees, not the model's words."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import jsonschema
import openai
import pytest

from tests.extras import need
from tests.server.conftest import TIMEOUT_S
from tests.server.tool_schemas import SCHEMAS, TIME, WEATHER

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather forecast", "parameters": WEATHER,
     "strict": True},
    {"type": "function", "name": "get_time", "description": "Time in a timezone", "parameters": TIME,
     "strict": True},
]  # fmt: skip
QUESTION = "What is the weather in Osaka for the next 3 days?"
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}

JSON_OBJECT = {"type": "json_object"}


def check_calls(response, names=tuple(SCHEMAS)) -> list:
    """The response's function calls: each named as offered, its arguments valid unless the
    answer was cut inside it by max_output_tokens. Returns the completed ones."""
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and all(item.type == "function_call" for item in response.output), response.output
    done = []
    for call in calls:
        assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.name in names
        if call.status == "incomplete":  # only the last call, of an answer cut by max_output_tokens
            assert call is calls[-1] and response.status == "incomplete"
            assert response.incomplete_details.reason == "max_output_tokens"
            continue
        assert call.status == "completed"
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        done.append(call)
    if response.status == "completed":
        assert done == calls
    return done


@pytest.mark.parametrize("seed", [0, 1])
def test_required_gives_function_calls_whose_arguments_validate(client, model_name, seed):
    response = client.responses.create(
        model=model_name, input=QUESTION, tools=TOOLS, tool_choice="required", max_output_tokens=200,
        temperature=0.8, extra_body={"seed": seed},
    )  # fmt: skip
    check_calls(response)
    assert response.tool_choice == "required" and [t.name for t in response.tools] == [
        "get_weather",
        "get_time",
    ]


def test_a_named_function_streams_its_arguments_in_deltas(client, model_name):
    with client.responses.stream(
        model=model_name, input=QUESTION, tools=TOOLS, tool_choice={"type": "function", "name": "get_time"},
        max_output_tokens=200, temperature=0,
    ) as stream:  # fmt: skip
        events = list(stream)
    final = events[-1].response  # (the client's get_final_response wants response.completed)
    types = [e.type for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-3:-1] == ["response.function_call_arguments.done", "response.output_item.done"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert set(types[3:-3]) == {"response.function_call_arguments.delta"}  # a named function: one call
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, done, item_done = events[2].item, events[-3], events[-2].item
    deltas = [e.delta for e in events[3:-3]]
    assert len(deltas) > 1 and "".join(deltas) == done.arguments == item_done.arguments  # in pieces
    assert added.type == "function_call" and added.name == done.name == "get_time" and added.arguments == ""
    assert added.call_id == item_done.call_id and added.id == item_done.id == done.item_id
    check_calls(final, names=("get_time",))
    assert final.output[0].arguments == item_done.arguments


def test_a_whole_response_with_a_call_equals_the_stream(client, model_name):
    request = dict(model=model_name, input=QUESTION, tools=TOOLS, tool_choice="required",
                   max_output_tokens=200, temperature=0)  # fmt: skip
    client.responses.create(**request)  # the same prompt-cache state for the next two (see test_openai)
    whole = client.responses.create(**request)
    streamed = [e for e in client.responses.create(**request, stream=True)][-1].response
    assert [(c.name, c.arguments, c.status) for c in whole.output] == [
        (c.name, c.arguments, c.status) for c in streamed.output
    ]
    check_calls(whole)


def test_a_two_turn_exchange_with_the_calls_output(client, model_name):
    named = {"type": "function", "name": "get_weather"}
    first = client.responses.create(
        model=model_name, input=QUESTION, tools=TOOLS, tool_choice=named, max_output_tokens=200, temperature=0
    )
    (call,) = check_calls(first, names=("get_weather",))
    conversation = [
        {"role": "user", "content": QUESTION},
        call.model_dump(exclude_none=True),  # the item as it came back
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": json.dumps({"forecast": "sunny"}),
        },
    ]
    for tool_choice in ("none", "auto"):
        second = client.responses.create(
            model=model_name, input=conversation, tools=TOOLS, tool_choice=tool_choice, max_output_tokens=48,
            temperature=0,
        )  # fmt: skip
        assert second.status in ("completed", "incomplete")
        if tool_choice == "none":
            (message,) = second.output
            assert message.type == "message" and second.output_text
        elif second.output[0].type == "function_call":  # auto: the model may call again
            check_calls(second)
    with client.responses.stream(
        model=model_name, input=conversation, tools=TOOLS, tool_choice="none", max_output_tokens=16
    ) as stream:
        events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text


def test_text_format_json_schema_answers_validate(client, model_name):
    fmt = {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}
    request = dict(model=model_name, input="Describe Osaka.", text={"format": fmt}, max_output_tokens=64,
                   temperature=0.7)  # fmt: skip
    whole = client.responses.create(**request)
    with client.responses.stream(**request) as stream:
        streamed = list(stream)[-1].response
    for response in (whole, streamed):
        assert response.text.format.type == "json_schema"
        if response.status == "completed":
            jsonschema.validate(json.loads(response.output_text), CITY)
        else:  # cut by max_output_tokens: a prefix of a valid answer
            assert response.output_text.startswith("{")
    anything = client.responses.create(
        model=model_name, input="A JSON object, please.", text={"format": {"type": "json_object"}},
        max_output_tokens=64,
    )  # fmt: skip
    if anything.status == "completed":
        assert isinstance(json.loads(anything.output_text), dict)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "name": "f", "parameters": {"if": {}}}]}, "tools[0].parameters"),
        ({"tools": [{"type": "function", "name": "bad name", "parameters": {}}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0].name"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [*TOOLS, TOOLS[0]]}, "tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "required", "text": {"format": JSON_OBJECT}}, "text.format"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"if": {}}}}},
         "text.format.schema"),
        ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
    ],
)  # fmt: skip
def test_bad_tools_are_400_naming_the_field(http, model_name, extra, param):
    for stream in (False, True):
        body = {"model": model_name, "input": QUESTION, "max_output_tokens": 4, "stream": stream, **extra}
        response = http.post("/v1/responses", json=body)
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["param"] == param


def test_the_openai_agents_sdk_runs_an_agent_with_one_tool(server, model_name):
    sdk = need("agents", "test")
    sdk.set_tracing_disabled(True)  # the SDK would send its traces to OpenAI
    client = openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S
    )
    asked: list[str] = []

    @sdk.function_tool
    def get_weather(city: str) -> str:
        """The weather forecast for a city."""
        asked.append(city)
        return f"Sunny in {city}, 21 C."

    class AnswerAfterTheTool(sdk.AgentHooks):
        """The tool is forced (a 135M model may not call it by itself); once it ran, the
        model answers in text (it could call again and again under `auto`)."""

        async def on_tool_end(self, context, agent, tool, result) -> None:
            agent.model_settings = dataclasses.replace(agent.model_settings, tool_choice="none")

    def agent():
        return sdk.Agent(
            name="Forecaster",
            instructions="Use the tool, then answer in one short sentence.",
            model=sdk.OpenAIResponsesModel(model=model_name, openai_client=client),
            model_settings=sdk.ModelSettings(tool_choice="get_weather", max_tokens=160, temperature=0),
            tools=[get_weather],
            reset_tool_choice=False,
            hooks=AnswerAfterTheTool(),
        )

    async def whole() -> None:
        result = await sdk.Runner.run(agent(), "What is the weather in Osaka?", max_turns=4)
        kinds = [item.type for item in result.new_items]
        assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
        assert result.final_output

    async def streamed() -> None:
        run = sdk.Runner.run_streamed(agent(), "What is the weather in Osaka?", max_turns=4)
        raw = [e.data async for e in run.stream_events() if e.type == "raw_response_event"]
        deltas = [e.delta for e in raw if e.type == "response.function_call_arguments.delta"]
        (done,) = [e for e in raw if e.type == "response.function_call_arguments.done"]
        assert "".join(deltas) == done.arguments and json.loads(done.arguments)["city"] == asked[-1]
        text = "".join(e.delta for e in raw if e.type == "response.output_text.delta")
        assert text == run.final_output

    async def both() -> None:  # one event loop: the async client belongs to it
        for run in (whole, streamed):
            try:
                await run()
            except sdk.exceptions.ModelBehaviorError as exc:  # as with OpenAI: an answer cut by
                assert "max_output_tokens" in str(exc)  # max_output_tokens is not a final output
                assert asked  # ... but the tool ran before it

    asyncio.run(both())
    assert len(asked) >= 2
