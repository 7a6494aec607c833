"""POST /v1/messages and /v1/messages/count_tokens with the official `anthropic` SDK and raw
HTTP, on the embedded model: text streamed and whole, a forced tool call and its result
answered, a Claude-Code-shaped request. Every answer and event is checked against the SDK's own
types; what the model says is never checked, only its structure."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.server.anthropic_checks import check_stream, checked_event, checked_message, frames
from tests.server.conftest import TIMEOUT_S

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]


@pytest.fixture
def sdk(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def _raw_stream(http, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    response = http.post("/v1/messages", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in response.text
    return frames(response.text)


def test_the_sdk_streams_text(sdk, model_name):
    with sdk.messages.stream(
        model=model_name,
        max_tokens=8,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hi."}],
        extra_body={"temperature": 0},  # (not among the arguments of recent SDKs)
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(e.text for e in events if e.type == "text")
    assert text and message.content[0].type == "text" and message.content[0].text == text
    checked_message(message.model_dump())
    assert message.stop_reason in ("end_turn", "max_tokens") and message.model == model_name
    assert 0 < message.usage.output_tokens <= 8
    if message.stop_reason == "max_tokens":
        assert message.usage.output_tokens == 8


def test_the_raw_stream_is_anthropics_event_sequence(http, model_name):
    body = {"model": model_name, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}], "top_k": 1}
    pairs = _raw_stream(http, body)
    message = check_stream(pairs)
    assert message.stop_reason in ("end_turn", "max_tokens")
    start = pairs[0][1]["message"]
    assert start["content"] == [] and start["usage"]["input_tokens"] > 0 and start["stop_reason"] is None


def test_a_whole_answer_is_a_message(sdk, model_name):
    message = sdk.messages.create(
        model=model_name,
        max_tokens=6,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in English."}],
        messages=[
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]},
            {"role": "user", "content": [{"type": "text", "text": "Another one."}]},
        ],
        metadata={"user_id": "someone"},
        extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 40},
    )
    checked_message(message.model_dump())
    assert [block.type for block in message.content] == ["text"]
    assert message.stop_reason in ("end_turn", "max_tokens") and 0 < message.usage.output_tokens <= 6


def test_count_tokens_counts_the_prompt_a_generation_has(sdk, model_name):
    request = {
        "model": model_name,
        "system": "Be brief.",
        "messages": ASK,
        "tools": [WEATHER],
    }
    counted = sdk.messages.count_tokens(**request)
    message = sdk.messages.create(**request, max_tokens=1)
    usage = message.usage
    prompt = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert counted.input_tokens == prompt
    # the tools are in the prompt (llmflow's instructions, for a template that renders none)
    assert sdk.messages.count_tokens(model=model_name, messages=ASK).input_tokens < counted.input_tokens


def test_a_tool_call_with_tool_choice_any_and_its_result_answered(sdk, model_name):
    # one call at most: a model may otherwise go on calling until max_tokens
    choice = {"type": "any", "disable_parallel_tool_use": True}
    message = sdk.messages.create(
        model=model_name, max_tokens=100, messages=ASK, tools=[WEATHER], tool_choice=choice
    )
    checked_message(message.model_dump())
    assert message.stop_reason == "tool_use"
    calls = [block for block in message.content if block.type == "tool_use"]
    assert calls and all(call.name == "get_weather" and isinstance(call.input["city"], str) for call in calls)
    results = [
        {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "Sunny, 21 °C"}]}
        for call in calls
    ]
    conversation = [
        *ASK,
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": results},
    ]
    answer = sdk.messages.create(model=model_name, max_tokens=8, messages=conversation, tools=[WEATHER])
    checked_message(answer.model_dump())
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    failed = [{**results[0], "is_error": True, "content": "the service is down"}]
    conversation[-1] = {"role": "user", "content": failed}
    checked_message(sdk.messages.create(model=model_name, max_tokens=4, messages=conversation).model_dump())


def test_a_streamed_tool_call(sdk, http, model_name):
    body = {"model": model_name, "max_tokens": 100, "messages": ASK, "tools": [WEATHER]}
    pairs = _raw_stream(http, {**body, "tool_choice": {"type": "tool", "name": "get_weather"}})
    message = check_stream(pairs)
    assert message.stop_reason == "tool_use"
    [call] = message.content
    assert call.type == "tool_use" and call.name == "get_weather" and isinstance(call.input["city"], str)
    assert any(payload.get("delta", {}).get("type") == "input_json_delta" for _, payload in pairs)
    # the SDK's own stream helper reads the same
    with sdk.messages.stream(
        **body, tool_choice={"type": "any", "disable_parallel_tool_use": True}
    ) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["tool_use"] and final.stop_reason == "tool_use"


def _claude_code_request(model_name: str) -> dict[str, Any]:
    """What a coding agent sends: a long system prompt in blocks (with cache_control), ~20 tools,
    metadata, a conversation that already used a tool, `stream: true`."""
    tools = [
        {
            "name": f"tool_{i}",
            "description": f"Tool {i}.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
        for i in range(20)
    ]
    system = [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Follow the rules. " * 40, "cache_control": {"type": "ephemeral"}},
    ]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<context>a repository</context>"},
                {"type": "text", "text": "List the files."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I will list them."},
                {"type": "tool_use", "id": "toolu_01", "name": "tool_3", "input": {"path": "."}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "README.md\nsetup.py"},
                {"type": "text", "text": "Now say which one is the readme."},
            ],
        },
    ]
    return {
        "model": model_name,
        "max_tokens": 8,
        "system": system,
        "messages": messages,
        "tools": tools,
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "user_abc"},
        "temperature": 1,
        "stream": True,
    }


def test_a_claude_code_shaped_request_is_answered_in_order(http, sdk, model_name):
    request = _claude_code_request(model_name)
    response = http.post(
        "/v1/messages",
        json=request,
        headers={"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"},
    )
    assert response.status_code == 200, response.text
    pairs = frames(response.text)
    message = check_stream(pairs)
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")
    counted = sdk.messages.count_tokens(
        **{k: v for k, v in request.items() if k not in ("max_tokens", "metadata", "temperature", "stream")}
    )
    assert counted.input_tokens == pairs[0][1]["message"]["usage"]["input_tokens"]


def test_the_sdk_raises_its_own_errors(sdk, model_name):
    with pytest.raises(anthropic.BadRequestError) as bad:
        sdk.messages.create(model=model_name, max_tokens=0, messages=ASK)
    assert bad.value.status_code == 400 and bad.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(model="claude-unknown", max_tokens=4, messages=ASK)
    checked_event("error", missing.value.body)


def test_the_key_may_come_as_x_api_key(start_server, model_name):
    body = {"model": model_name, "max_tokens": 1, "messages": ASK}
    with start_server(api_key="sesame") as server:
        right = anthropic.Anthropic(base_url=server.url, api_key="sesame", max_retries=0, timeout=TIMEOUT_S)
        checked_message(right.messages.create(**body).model_dump())
        wrong = anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0, timeout=TIMEOUT_S)
        with pytest.raises(anthropic.AuthenticationError) as refused:
            wrong.messages.create(**body)
        assert refused.value.body["error"]["type"] == "authentication_error"
        bearer = anthropic.Anthropic(
            base_url=server.url, auth_token="sesame", api_key=None, max_retries=0, timeout=TIMEOUT_S
        )
        assert bearer.messages.count_tokens(model=model_name, messages=ASK).input_tokens > 0
