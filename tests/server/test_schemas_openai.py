"""Every Chat Completions and Completions object valid against OpenAI's published schema (the
`openai` SDK's types, strict, and the fields OpenAI's OpenAPI document requires), whole and
streamed: text, function calls, structured output, logprobs, several choices, an answer cut by
max_tokens, and errors before and after streaming began.

Text and calls come from the embedded model, whose words differ between machines: only their
structure is checked. The scripted engine's answer is longer than the token limits here (always
cut); the failing one breaks in the middle of a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.server.conftest import sse_events
from tests.server.schema_checks import (
    beside_scripted_and_failing,
    check_chat_chunk,
    check_chat_completion,
    check_error_body,
    check_text_completion,
)
from tests.server.tool_schemas import TIME, WEATHER

HI = [{"role": "user", "content": "Say hi."}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
    "additionalProperties": False,
}
CHAT = {
    "text": {"messages": HI, "max_tokens": 12},
    "tool calls": {
        "messages": [{"role": "user", "content": "What is the weather in Osaka for the next 3 days?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": 96,
    },
    "structured output": {
        "messages": [{"role": "user", "content": "Name a city."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
        "max_tokens": 48,
    },
    "logprobs": {"messages": HI, "max_tokens": 4, "logprobs": True, "top_logprobs": 2},
    "two choices": {"messages": HI, "max_tokens": 4, "n": 2, "temperature": 0.8, "seed": 1},
    "length": {"model": "scripted", "messages": HI, "max_tokens": 5},
}
TEXT = {
    "text": {"prompt": "Once upon a time", "max_tokens": 8},
    "logprobs": {"prompt": "Once upon a time", "max_tokens": 4, "logprobs": 2},
    "length": {"model": "scripted", "prompt": "Osaka", "max_tokens": 5},
}


@pytest.fixture(scope="module")
def http(default_served) -> Iterator[httpx.Client]:
    with beside_scripted_and_failing(default_served) as client:
        yield client


def request(default_served, cases: dict, case: str, **extra) -> dict:
    return {"model": default_served.name, "temperature": 0, **cases[case], **extra}


def chunks(http: httpx.Client, path: str, body: dict) -> list[dict]:
    response = http.post(path, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


@pytest.mark.parametrize("case", list(CHAT))
def test_a_whole_chat_completion_is_valid(http, default_served, case):
    response = http.post("/v1/chat/completions", json=request(default_served, CHAT, case))
    assert response.status_code == 200, response.text
    completion = check_chat_completion(response.json())
    for choice in completion.choices:
        assert choice.message.refusal is None and choice.message.annotations == []
    if case == "tool calls":
        assert completion.choices[0].finish_reason in ("tool_calls", "length")
        assert completion.choices[0].message.tool_calls
    if case == "length":
        assert completion.choices[0].finish_reason == "length"


@pytest.mark.parametrize("case", list(CHAT))
def test_every_chat_chunk_is_valid(http, default_served, case):
    body = request(default_served, CHAT, case, stream_options={"include_usage": True})
    parsed = [check_chat_chunk(chunk) for chunk in chunks(http, "/v1/chat/completions", body)]
    assert parsed[-1].choices == [] and parsed[-1].usage is not None
    reasons = [choice.finish_reason for chunk in parsed for choice in chunk.choices if choice.finish_reason]
    assert len(reasons) == body.get("n", 1)
    if case == "tool calls":
        assert any(choice.delta.tool_calls for chunk in parsed for choice in chunk.choices)


@pytest.mark.parametrize("case", list(TEXT))
def test_text_completions_whole_and_streamed_are_valid(http, default_served, case):
    body = request(default_served, TEXT, case)
    whole = http.post("/v1/completions", json=body)
    assert whole.status_code == 200, whole.text
    check_text_completion(whole.json())
    streamed = chunks(http, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    for chunk in streamed:
        check_text_completion(chunk)
    assert streamed[-1]["choices"] == [] and streamed[-1]["usage"]["completion_tokens"] <= body["max_tokens"]


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"messages": HI, "temperature": -1}, "temperature"),
        ("/v1/chat/completions", {"messages": HI, "tools": [{"type": "nope"}]}, "tools.0.type"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": -1}, "max_tokens"),
    ],
)
def test_errors_before_streaming_are_openai_error_bodies(http, default_served, path, extra, param):
    for stream in (False, True):
        response = http.post(path, json={"model": default_served.name, **extra, "stream": stream})
        assert response.status_code == 400 and response.headers["content-type"] == "application/json"
        check_error_body(response.json())
        assert response.json()["error"]["param"].startswith(param.split(".")[0])


@pytest.mark.parametrize(
    ("path", "extra"), [("/v1/chat/completions", {"messages": HI}), ("/v1/completions", {"prompt": "Hi"})]
)
def test_an_error_after_streaming_began_is_an_openai_error_object(http, path, extra):
    events = chunks(http, path, {"model": "failing", "max_tokens": 200, **extra})
    *answer, error = events
    assert answer and "error" in error
    check_error_body(error)
