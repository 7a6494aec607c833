"""Reading a Responses request: input as a string or items, instructions, sampling, refusals."""

from __future__ import annotations

import pytest

from llmflow.constraints import Constraint
from llmflow.errors import InvalidParams, InvalidRequest
from llmflow.params import SamplingParams
from llmflow.prompts import RawPrompt
from llmflow.responses.request import read_request
from llmflow.tools import ToolChoice
from llmflow.types import Message, ToolCall

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather",
    "parameters": WEATHER,
    "strict": True,
}


def test_a_string_input_with_instructions_and_sampling():
    read = read_request(
        {"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5, "temperature": 0, "top_p": 0.5}
    )
    assert read.messages == [Message("system", "Be brief."), Message("user", "Hi")]
    params = read.sampling(SamplingParams())
    assert (params.max_tokens, params.temperature, params.top_p) == (5, 0, 0.5)


def test_items_with_text_parts_and_roles():
    read = read_request(
        {
            "input": [
                {"role": "developer", "content": "Rules."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_1",
                    "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
                },
                {"role": "user", "content": "Again"},
            ]
        }
    )
    assert read.messages == [
        Message("system", "Rules."),
        Message("user", "Hi"),
        Message("assistant", "Hello"),
        Message("user", "Again"),
    ]


def test_llmflow_params_by_their_field():
    read = read_request({"input": "Hi"}, {"top_k": 3, "seed": 1}, "custom_inputs")
    assert read.sampling(SamplingParams()).top_k == 3
    with pytest.raises(InvalidParams) as bad:
        read_request({"input": "Hi"}, {"top_k": -1}, "custom_inputs").sampling(SamplingParams())
    assert bad.value.param == "custom_inputs.top_k"
    with pytest.raises(InvalidParams) as unknown:
        read_request({"input": "Hi"}, {"colour": "red"}, "custom_inputs")
    assert unknown.value.param == "custom_inputs.colour"
    with pytest.raises(InvalidParams) as renamed:
        read_request({"input": "Hi", "max_output_tokens": 0}).sampling(SamplingParams())
    assert renamed.value.param == "max_output_tokens"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": "Hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "Hi", "store": True}, "store"),
        ({"input": "Hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "Hi", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0].name"),
        ({"input": "Hi", "tools": [{**TOOL, "parameters": []}]}, "tools[0].parameters"),
        ({"input": "Hi", "tools": [{**TOOL, "strict": "yes"}]}, "tools[0].strict"),
        ({"input": "Hi", "tools": [TOOL, TOOL]}, "tools"),
        ({"input": "Hi", "tool_choice": "required"}, "tool_choice"),
        (
            {"input": "Hi", "tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice.name",
        ),
        ({"input": "Hi", "tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice"),
        ({"input": "Hi", "tools": [TOOL], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"input": "Hi", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
        ({"input": "Hi", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"input": "Hi", "text": "json"}, "text"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": 1}]}, "input[0].output"),
        ({"input": [{"type": "image_generation_call"}]}, "input[0].type"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0]"),
        ({"input": "Hi", "instructions": 3}, "instructions"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(body, field):
    with pytest.raises(InvalidRequest) as refused:
        read_request(body)
    assert refused.value.param == field


def test_function_tools_tool_choice_and_parallel_calls():
    read = read_request(
        {"input": "Hi", "tools": [TOOL], "tool_choice": {"type": "function", "name": "get_weather"}}
    )
    (tool,) = read.tools
    assert (tool.name, tool.description, tool.parameters, tool.field) == (
        "get_weather",
        "Weather",
        WEATHER,
        "tools[0].parameters",
    )
    assert read.tool_choice == ToolChoice("function", "get_weather") and read.parallel_tool_calls
    assert read_request({"input": "Hi", "tools": [TOOL]}).tool_choice == ToolChoice("auto")
    assert not read_request(
        {"input": "Hi", "tools": [TOOL], "parallel_tool_calls": False}
    ).parallel_tool_calls
    assert read_request({"input": "Hi", "tool_choice": "none"}).tool_choice == ToolChoice("none")


def _call(call_id: str, arguments: str, **extra: str) -> dict:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": arguments,
        **extra,
    }


def test_function_calls_and_their_outputs_join_the_conversation_as_chat_has_them():
    looking = [{"type": "output_text", "text": "Looking."}]
    read = read_request(
        {
            "input": [
                {"role": "user", "content": "Weather in Osaka and Kyoto?"},
                {"type": "message", "role": "assistant", "content": looking},
                _call("c1", '{"city": "Osaka"}'),
                _call("c2", '{"city": "Kyoto"}', id="fc_2", status="completed"),
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "rain"}],
                },
                _call("c3", "{}"),
            ]
        }
    )
    assert read.messages == [
        Message("user", "Weather in Osaka and Kyoto?"),
        Message(
            "assistant",
            "Looking.",
            (
                ToolCall("c1", "get_weather", '{"city": "Osaka"}'),
                ToolCall("c2", "get_weather", '{"city": "Kyoto"}'),
            ),
        ),
        Message("tool", "sunny", tool_call_id="c1"),
        Message("tool", "rain", tool_call_id="c2"),
        Message("assistant", "", (ToolCall("c3", "get_weather", "{}"),)),
    ]


def test_text_format_is_a_constraint():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "a", "schema": schema, "strict": True}
    read = read_request({"input": "Hi", "text": {"format": fmt}})
    assert read.output == Constraint.json_schema(schema) and read.output.field == "text.format.schema"
    assert read_request({"input": "Hi", "text": {"format": {"type": "json_object"}}}).output == (
        Constraint.json_object()
    )
    assert read_request({"input": "Hi", "text": {"format": {"type": "text"}}}).output is None


def test_the_tool_plan_and_the_one_constraint():
    read = read_request({"input": "Hi", "tools": [TOOL], "tool_choice": "required"})
    plan = read.plan(RawPrompt())
    assert plan.active and plan.constraint is not None and read.constraint(plan) == plan.constraint
    assert "get_weather" in plan.messages[0].content  # the generic format's instructions
    both = read_request({**{"input": "Hi", "tools": [TOOL]}, "text": {"format": {"type": "json_object"}}})
    with pytest.raises(InvalidRequest) as refused:
        both.constraint(both.plan(RawPrompt()))
    assert refused.value.param == "text.format"
    unused = read_request(
        {"input": "Hi", "tools": [TOOL], "tool_choice": "none", "text": {"format": {"type": "json_object"}}}
    )
    assert unused.constraint(unused.plan(RawPrompt())) == Constraint.json_object()


def test_tools_may_come_in_the_params_of_a_responses_agent():
    read = read_request({"input": "Hi"}, {"tools": [TOOL], "top_k": 2}, "custom_inputs")
    assert [t.field for t in read.tools] == ["custom_inputs.tools[0].parameters"] and read.params == {
        "top_k": 2
    }
    with pytest.raises(InvalidRequest) as twice:
        read_request({"input": "Hi", "tools": [TOOL]}, {"tools": [TOOL]}, "custom_inputs")
    assert twice.value.param == "custom_inputs.tools"
