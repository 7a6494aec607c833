"""`tool_choice="auto"` with chat templates in the shape of Llama 3.1's (a bare JSON call with
`parameters`, after an optional `<|python_tag|>`) and Mistral's (`[TOOL_CALLS]` and a JSON list),
on the embedded model through the real server and the official openai client. The constraint
starts when the answer opens a call: whatever the model writes, every call validates, and an
answer that ends as text never opened one. Nothing here depends on what the model chooses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from llmflow import LLM
from llmflow.server import ServedModel
from llmflow.tools import format_for
from llmflow.tools.formats import Llama3Format, MistralFormat
from tests.server.conftest import TIMEOUT_S, running
from tests.server.test_tool_calls import TOOLS, check_calls
from tests.server.test_tool_calls_template import MESSAGES, auto_answer

#: written for these tests: each renders the tools and past calls as its format does, in the
#: embedded model's own turn tokens
CALL_TEMPLATE = """\
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>ipython
{{ message.content }}<|im_end|>
{% elif message.tool_calls %}<|im_start|>assistant
{{ OPEN }}{% for call in message.tool_calls %}{{ CALL(call) }}{% endfor %}{{ CLOSE }}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{%- if loop.first and tools %}
Call a function when it helps, answering with {{ SHAPE }}. Functions: {{ tools | tojson }}
{%- endif %}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""
LLAMA3 = (
    '{% set OPEN = "<|python_tag|>" %}{% set CLOSE = "" %}'
    '{% set SHAPE = \'{"name": ..., "parameters": {...}}\' %}'
    '{% macro CALL(call) %}{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments }}}'
    "{% endmacro %}{# a Llama 3 template: <|start_header_id|> #}" + CALL_TEMPLATE
)
MISTRAL = (
    '{% set OPEN = "[TOOL_CALLS][" %}{% set CLOSE = "]" %}'
    '{% set SHAPE = \'[TOOL_CALLS][{"name": ..., "arguments": {...}}]\' %}'
    '{% macro CALL(call) %}{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}'
    "{% endmacro %}" + CALL_TEMPLATE
)
TEMPLATES = {"llama3": (LLAMA3, Llama3Format), "mistral": (MISTRAL, MistralFormat)}
#: a call and its result, then a new question: the small model calls again now and then
CALLED_BEFORE = [*MESSAGES[:3], {"role": "user", "content": "And in Osaka for 3 days?"}]


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def served(request) -> Iterator[tuple[str, OpenAI]]:
    template, fmt = TEMPLATES[request.param]
    llm = LLM.load(chat_template=template)
    assert isinstance(format_for(llm.prompt_format), fmt)
    with running(ServedModel.from_llm(llm, request.param)) as server:
        yield (
            request.param,
            OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S),
        )
    llm.close()


@pytest.mark.timeout(600)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), temperature=st.sampled_from([0.0, 0.8, 1.5]), parallel=st.booleans())
def test_auto_calls_always_validate(served, seed, temperature, parallel):
    name, client = served
    choice = auto_answer(client, name, CALLED_BEFORE, 64, seed, temperature, parallel)
    if not choice.message.tool_calls and choice.finish_reason == "stop":  # text: it may not open like a call
        fmt = TEMPLATES[name][1]
        assert not (choice.message.content or "").startswith((fmt.opener, *fmt.markers))


def test_required_forces_a_call_in_the_format(served):
    name, client = served
    for seed, temperature in ((1, 0.0), (2, 1.5)):
        choice = client.chat.completions.create(
            model=name, messages=MESSAGES[-1:], tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, max_tokens=96, seed=seed, temperature=temperature,
        ).choices[0]  # fmt: skip
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message.tool_calls)
        assert len(choice.message.tool_calls) == 1
