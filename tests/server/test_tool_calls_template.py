"""Function calling with a chat template that renders tools the Hermes / Qwen 2.5 way (tools
listed in the system message, calls in `<tool_call>` blocks, results in `<tool_response>`), on
the embedded model through the real server and the official openai client. With `auto` the
model may answer in text or call, after text or not; whatever it writes, every call validates.
`required` still forces a call. Nothing here depends on what the model chooses to write."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from llmflow import LLM
from llmflow.server import ServedModel
from llmflow.tools import format_for
from llmflow.tools.formats import HermesFormat
from tests.server.conftest import TIMEOUT_S, running
from tests.server.test_tool_calls import TOOLS, check_calls
from tests.server.tool_schemas import SCHEMAS

#: written for this test, in the shape of Qwen 2.5's template
HERMES_TEMPLATE = """\
{%- if messages[0].role == "system" %}{% set system = messages[0].content %}{% set rest = messages[1:] %}\
{%- else %}{% set system = "You are a helpful assistant." %}{% set rest = messages %}{% endif %}
<|im_start|>system
{{ system }}
{%- if tools %}


# Tools

You may call functions to answer. Their signatures are in <tools></tools> tags:
<tools>
{%- for tool in tools %}

{{ tool | tojson }}
{%- endfor %}

</tools>

To call a function, write a JSON object with its name and arguments in <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>
{%- endif %}
<|im_end|>
{% for message in rest %}
{%- if message.role == "tool" %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.tool_calls %}
<|im_start|>assistant
{%- if message.content %}

{{ message.content }}
{%- endif %}
{%- for call in message.tool_calls %}

<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}
<|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""
#: an earlier exchange with a call, so that the small model is inclined to call again
MESSAGES = [
    {"role": "user", "content": "What is the weather in Paris tomorrow?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": "Paris", "unit": "celsius", "days": 1}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"forecast": "sunny", "high_c": 21})},
    {"role": "assistant", "content": "It will be sunny in Paris, with a high of 21 degrees."},
    {"role": "user", "content": "And what is the weather in Osaka for the next 3 days?"},
]


@pytest.fixture(scope="module")
def hermes_llm() -> Iterator[LLM]:
    llm = LLM.load(chat_template=HERMES_TEMPLATE)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def hermes_client(hermes_llm) -> Iterator[OpenAI]:
    with running(ServedModel.from_llm(hermes_llm, "hermes")) as server:
        yield OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def test_the_template_asks_for_the_hermes_format(hermes_llm):
    assert isinstance(format_for(hermes_llm.prompt_format), HermesFormat)


@pytest.mark.timeout(600)  # several generations over a long prompt
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    temperature=st.sampled_from([0.0, 0.8, 1.5]),
    parallel=st.booleans(),
)
def test_auto_calls_always_validate(hermes_client, seed, temperature, parallel):
    choice = auto_answer(hermes_client, "hermes", MESSAGES, 48, seed, temperature, parallel)
    if not choice.message.tool_calls:
        assert choice.finish_reason in ("stop", "length")
        if choice.finish_reason == "stop":  # an answer that opened a call closed it
            assert "<tool_call>" not in (choice.message.content or "")


def auto_answer(
    client: OpenAI, model: str, messages: list, max_tokens: int, seed: int, temperature: float, parallel: bool
) -> Any:
    """One answer with `tool_choice` left to `auto`: its calls, if it made any, validate (one at
    most unless `parallel`), and then it finished with `tool_calls` or was cut."""
    choice = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, max_tokens=max_tokens, seed=seed,
        temperature=temperature, parallel_tool_calls=parallel,
    ).choices[0]  # fmt: skip
    calls = choice.message.tool_calls
    if calls:
        check_calls(calls)
        assert parallel or len(calls) == 1
        assert choice.finish_reason in ("tool_calls", "length")
    return choice


def test_auto_streamed_calls_validate(hermes_client):
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in hermes_client.chat.completions.create(
        model="hermes", messages=MESSAGES, tools=TOOLS, max_tokens=48, seed=3, temperature=1.0,
        parallel_tool_calls=False, stream=True,
    ):  # fmt: skip
        finish = chunk.choices[0].finish_reason or finish
        for piece in chunk.choices[0].delta.tool_calls or ():
            if piece.id is not None:
                calls[piece.index] = {"name": piece.function.name, "arguments": ""}
            calls[piece.index]["arguments"] += piece.function.arguments or ""
    assert finish in ("stop", "length", "tool_calls")
    if finish == "length":  # the last call may have been cut
        calls.pop(max(calls, default=0), None)
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_required_forces_a_call(hermes_client):
    for seed, temperature in ((1, 0.0), (2, 1.5)):
        choice = hermes_client.chat.completions.create(
            model="hermes", messages=MESSAGES[-1:], tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, max_tokens=96, seed=seed, temperature=temperature,
        ).choices[0]  # fmt: skip
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message.tool_calls)
        assert len(choice.message.tool_calls) == 1
