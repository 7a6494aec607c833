"""Function calling with the embedded model (a template without tool support: llmflow's generic
format) through the official openai client: `required` and a named `tool_choice` always give
calls whose arguments validate; streamed `delta.tool_calls` joined equal the non-streamed call;
a two-turn exchange works; bad tools are a 400 naming the field."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.tool_schemas import SCHEMAS, TIME, WEATHER

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather forecast", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Time in a timezone", "parameters": TIME},
    },
]
MESSAGES = [{"role": "user", "content": "What is the weather in Osaka for the next 3 days?"}]


def check_calls(calls, names=("get_weather", "get_time")):
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), temperature=st.sampled_from([0.0, 0.8, 1.5]))
def test_required_always_gives_valid_calls(client, model_name, seed, temperature):
    answer = client.chat.completions.create(
        model=model_name, messages=MESSAGES, tools=TOOLS, tool_choice="required",
        max_tokens=160, seed=seed, temperature=temperature,
    )  # fmt: skip
    choice = answer.choices[0]
    if choice.finish_reason == "length" and not choice.message.tool_calls:  # cut inside the first call
        assert choice.message.content.startswith('{"tool_calls": [{"name": "get_')
        return
    assert choice.finish_reason in ("tool_calls", "length")  # length: the calls that closed in time
    check_calls(choice.message.tool_calls)


@pytest.mark.parametrize("parallel", [True, False])
def test_named_function(client, model_name, parallel):
    answer = client.chat.completions.create(
        model=model_name, messages=MESSAGES, tools=TOOLS, max_tokens=160, seed=11,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=parallel,
    )  # fmt: skip
    choice = answer.choices[0]
    if parallel and choice.finish_reason == "length":
        return  # the model kept calling until max_tokens: how many calls is its greedy choice
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message.tool_calls, names=("get_time",))
    if not parallel:
        assert len(choice.message.tool_calls) == 1
    assert choice.message.content is None


def test_streamed_calls_join_to_the_whole_call(client, model_name):
    kwargs = dict(
        model=model_name, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=160, seed=4,
    )  # fmt: skip
    whole = client.chat.completions.create(**kwargs).choices[0]
    assert whole.finish_reason == "tool_calls"
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    calls: dict[int, dict] = {}
    finish = None
    for chunk in chunks:
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for piece in delta.tool_calls or ():
            if piece.id is not None:
                assert piece.index not in calls and piece.function.name
                calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
            calls[piece.index]["arguments"] += piece.function.arguments or ""
    assert finish == "tool_calls"
    assert sum(1 for c in chunks if c.choices[0].delta.tool_calls) > len(calls)  # arguments in pieces
    streamed = [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    assert streamed == [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]


def test_two_turn_exchange(client, model_name):
    # one call: with parallel calls allowed, how many the model makes before max_tokens is its
    # greedy choice, which differs between llama.cpp builds
    first = client.chat.completions.create(
        model=model_name, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=160, seed=8,
    ).choices[0]  # fmt: skip
    assert first.finish_reason == "tool_calls"
    call = first.message.tool_calls[0]
    conversation = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny", "high_c": 21})},
    ]
    second = client.chat.completions.create(
        model=model_name, messages=conversation, tools=TOOLS, tool_choice="none", max_tokens=32, seed=8
    ).choices[0]
    assert second.finish_reason in ("stop", "length")
    assert second.message.tool_calls is None and second.message.content


def test_auto_answers_text_or_valid_calls(client, model_name):
    """Sampled answers: text, or calls that are valid. An answer that made its calls and then ran
    out of tokens finishes with `length` and keeps them (as OpenAI's does); which one a seed gives
    depends on the machine's numbers."""
    for seed in range(3):
        choice = client.chat.completions.create(
            model=model_name, messages=MESSAGES, tools=TOOLS, max_tokens=96, seed=seed
        ).choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason in ("tool_calls", "length")
            check_calls(choice.message.tool_calls)
        else:
            assert choice.finish_reason in ("stop", "length") and choice.message.content


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"if": {}}}}]},
         "tools[0].function.parameters"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice.function.name"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
         "response_format"),
        ({"tools": [*TOOLS, TOOLS[0]]}, "tools"),
    ],
)  # fmt: skip
def test_bad_tools_are_400_naming_the_field(client, model_name, extra, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=model_name, messages=MESSAGES, max_tokens=4, stream=True, extra_body=extra
        )
    assert raised.value.body["param"] == param, raised.value.body
