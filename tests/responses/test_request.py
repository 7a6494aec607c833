"""Reading a Responses request: input as a string or items, instructions, sampling, refusals."""

from __future__ import annotations

import pytest

from llmflow.errors import InvalidParams, InvalidRequest
from llmflow.params import SamplingParams
from llmflow.responses.request import read_request
from llmflow.types import Message


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
        ({"input": "Hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
        ({"input": "Hi", "tool_choice": "required"}, "tool_choice"),
        ({"input": "Hi", "text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0]"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, "input[0].type"),
        ({"input": "Hi", "instructions": 3}, "instructions"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(body, field):
    with pytest.raises(InvalidRequest) as refused:
        read_request(body)
    assert refused.value.param == field
