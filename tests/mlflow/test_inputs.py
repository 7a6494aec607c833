"""Input and params parsing of the pyfunc model, and its signature: no model needed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mlflow.types import DataType

from llmflow.errors import InvalidMessages, InvalidParams, InvalidRequest
from llmflow.mlflow.inputs import parse_options, parse_rows, parse_single
from llmflow.mlflow.signature import build_signature, param_schema
from llmflow.params import PARAM_NAMES, SamplingParams
from llmflow.types import Message

HI = [{"role": "user", "content": "hi"}]
DEFAULTS = SamplingParams(max_tokens=12, stop=("<|im_end|>",))


@pytest.mark.parametrize(
    ("model_input", "expected"),
    [
        ("hello", ["hello"]),
        ({"prompt": "hello"}, ["hello"]),
        ({"messages": HI}, [[Message("user", "hi")]]),
        ([{"prompt": "a"}, "b", {"messages": HI}], ["a", "b", [Message("user", "hi")]]),
        (pd.DataFrame({"prompt": ["a", "b", "c"]}), ["a", "b", "c"]),
        (pd.DataFrame({"prompt": ["a", None], "messages": [None, HI]}), ["a", [Message("user", "hi")]]),
        (pd.DataFrame({"prompt": ["a", np.nan], "messages": [np.nan, HI]}), ["a", [Message("user", "hi")]]),
        ({"messages": np.array(HI, dtype=object)}, [[Message("user", "hi")]]),
    ],
)
def test_rows(model_input, expected):
    assert parse_rows(model_input) == expected


@pytest.mark.parametrize(
    ("model_input", "error", "field", "says"),
    [
        ({}, InvalidRequest, "input", "no `prompt` and no `messages`"),
        ({"prompt": "a", "messages": HI}, InvalidRequest, "input", "not both"),
        ({"question": "a"}, InvalidRequest, "input.question", "unknown input field"),
        ({"prompt": "a", "max_tokens": 5}, InvalidRequest, "input.max_tokens", "go in params"),
        ({"prompt": 5}, InvalidRequest, "input.prompt", "must be a string"),
        ({"messages": []}, InvalidMessages, "input.messages", "at least one message"),
        ({"messages": "hi"}, InvalidMessages, "input.messages", "must be a list"),
        ({"messages": [{"role": "x", "content": ""}]}, InvalidMessages, "input.messages[0].role", "one of"),
        ({"messages": [{"role": "user"}]}, InvalidMessages, "input.messages[0].content", "must be a string"),
        ([{"prompt": "a"}, {}], InvalidRequest, "input[1]", "no `prompt`"),
        ([{"prompt": "a"}, 7], InvalidRequest, "input[1]", "must be an object or a string"),
        ([], InvalidRequest, "input", "no input rows"),
        (pd.DataFrame({"prompt": []}), InvalidRequest, "input", "no input rows"),
        (42, InvalidRequest, "input", "not int"),
    ],
)
def test_bad_rows_name_the_field(model_input, error, field, says):
    with pytest.raises(error) as caught:
        parse_rows(model_input)
    assert caught.value.param == field
    assert says in str(caught.value)


def test_a_stream_takes_one_row():
    assert parse_single([{"prompt": "a"}]) == "a"
    with pytest.raises(InvalidRequest, match="one input, got 2 rows"):
        parse_single([{"prompt": "a"}, {"prompt": "b"}])


def test_no_params_means_the_defaults():
    options = parse_options(None, DEFAULTS)
    assert options.sampling == DEFAULTS
    assert options.system_prompt is None
    assert options.details is False


@pytest.mark.parametrize(
    ("params", "stops"),
    [
        ({"stop": "X"}, ("X", "<|im_end|>")),  # the seed's form; the default stops still apply
        ({"stop": ["X", "Y"]}, ("X", "Y", "<|im_end|>")),  # a list, when called without MLflow
        ({"stop_sequences": ["Y"]}, ("Y",)),  # replaces the default stops
        ({"stop": "X", "stop_sequences": ["Y"]}, ("X", "Y")),
        ({"stop": None, "stop_sequences": []}, ()),
        ({"stop": "<|im_end|>"}, ("<|im_end|>",)),  # duplicates collapse
    ],
)
def test_stop_and_stop_sequences_combine(params, stops):
    assert parse_options(params, DEFAULTS).sampling.stop == stops


def test_params_override_defaults_and_none_means_default():
    options = parse_options(
        {"max_tokens": 3, "temperature": 0, "seed": None, "system_prompt": "Be brief.", "details": True},
        DEFAULTS,
    )
    assert options.sampling.max_tokens == 3
    assert options.sampling.temperature == 0
    assert options.sampling.seed is None
    assert options.system_prompt == "Be brief."
    assert options.details is True


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"stop_sequences": [1, 2]}, "stop_sequences"),
        ({"system_prompt": 3}, "system_prompt"),
        ({"details": "yes"}, "details"),
        ("max_tokens=3", "params"),
    ],
)
def test_bad_params_name_the_field(params, field):
    with pytest.raises(InvalidParams) as caught:
        parse_options(params, DEFAULTS)
    assert caught.value.param == field


def test_param_schema_has_every_sampling_param_with_its_default():
    schema = {spec.name: spec for spec in param_schema(DEFAULTS, "Be brief.").params}
    assert set(PARAM_NAMES) <= set(schema)
    assert {"stop_sequences", "system_prompt", "details"} <= set(schema)
    for name in PARAM_NAMES:
        if name != "stop":
            assert schema[name].default == getattr(DEFAULTS, name), name
    assert schema["max_tokens"].dtype == DataType.long
    assert schema["temperature"].dtype == DataType.double
    assert schema["stop"].dtype == DataType.string and schema["stop"].shape is None
    assert schema["stop_sequences"].shape == (-1,)
    assert schema["stop_sequences"].default == ["<|im_end|>"]
    assert schema["system_prompt"].default == "Be brief."


def test_signature_inputs_are_prompt_or_messages_and_images():
    signature = build_signature(SamplingParams())
    inputs = {spec.name: spec for spec in signature.inputs.inputs}
    assert set(inputs) == {"prompt", "messages", "images"}
    assert not any(spec.required for spec in inputs.values())


@pytest.mark.parametrize("value", [False, np.bool_(False)])
def test_a_predict_call_opts_out_of_speculation_by_param(value):
    assert DEFAULTS.speculative is True
    assert parse_options({"speculative": value}, DEFAULTS).sampling.speculative is False
