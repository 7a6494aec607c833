"""Anthropic's routes on a scripted engine: bad input is a clean 4xx in Anthropic's error shape
naming the field, never a 5xx; an error during a stream is an `error` event; stop sequences and
a reasoning model's thinking blocks (the scripted answer is the same on every machine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from llmflow import LLM
from llmflow.engines.base import TokenRequest
from llmflow.prompts import ChatTemplate
from llmflow.server import ServedModel
from tests.fakes.scripted_engine import ScriptedEngine
from tests.server.anthropic_checks import check_stream, checked_error, checked_event, checked_message, frames
from tests.server.conftest import TIMEOUT_S, running
from tests.streaming.test_reasoning import OPENING_TEMPLATE, THOUGHT_THEN_ANSWER

USER = [{"role": "user", "content": "Hi"}]
BASE = {"model": "scripted", "max_tokens": 16, "messages": USER}
TOOL = {"name": "look", "input_schema": {"type": "object", "properties": {}}}


class FailingEngine(ScriptedEngine):
    """Three tokens of its answer, then a failure inside the engine."""

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        yield from list(super().tokens(request))[:3]
        raise RuntimeError("the device fell over")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    models = [
        ServedModel.from_llm(LLM(ScriptedEngine()), "scripted"),
        ServedModel.from_llm(
            LLM(ScriptedEngine(THOUGHT_THEN_ANSWER), ChatTemplate(OPENING_TEMPLATE)), "thinker"
        ),
        ServedModel.from_llm(LLM(FailingEngine()), "failing"),
    ]
    with running(models, max_body_bytes=1024 * 1024) as server:
        yield server.url


@pytest.fixture
def http(url) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        yield client


def _refused(response: httpx.Response, status: int, kind: str, *names: str) -> str:
    assert response.status_code == status, response.text
    error = checked_error(response.json(), kind)
    for name in names:
        assert name in error["message"], (name, error)
    return error["message"]


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` as JSON with non-ASCII escaped (httpx's own encoding refuses a lone surrogate)."""
    return http.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def _with(**fields: Any) -> dict[str, Any]:
    return {**BASE, **fields}


def _user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


CALLED = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}],
}

BAD_BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "no max_tokens": ({"model": "scripted", "messages": USER}, "max_tokens"),
    "max_tokens 0": (_with(max_tokens=0), "max_tokens"),
    "an unknown field": (_with(frequency_penalty=1), "frequency_penalty"),
    "no messages": (_with(messages=[]), "messages"),
    "a bad role": (_with(messages=[{"role": "system", "content": "x"}]), "messages.0.role"),
    "content not text or blocks": (_with(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
    "content a list of strings": (_with(messages=[{"role": "user", "content": ["a"]}]), "messages.0.content"),
    "an image block without a media type": (
        _with(messages=_user({"type": "image", "source": {"type": "base64", "data": "AA=="}})),
        "messages.0.content.0.source.base64.media_type",
    ),
    "an image block of no image": (
        _with(
            messages=_user(
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
            )
        ),
        "messages.0.content.0",
    ),
    "an image in an assistant message": (
        _with(
            messages=[
                {"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}
            ]
        ),
        "messages.0.content.0.type",
    ),
    "a block of no type": (_with(messages=_user({"text": "x"})), "messages.0.content.0.type"),
    "a text block without text": (_with(messages=_user({"type": "text"})), "messages.0.content.0.text"),
    "an unknown field in a block": (
        _with(messages=_user({"type": "text", "text": "x", "colour": "red"})),
        "messages.0.content.0.colour",
    ),
    "a tool_use block from the user": (
        _with(messages=_user({"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}})),
        "messages.0.content.0.type",
    ),
    "a tool_result block from the assistant": (
        _with(
            messages=[*USER, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]
        ),
        "messages.1.content.0.type",
    ),
    "a tool_result for an unknown id": (
        _with(messages=[*USER, CALLED, *_user({"type": "tool_result", "tool_use_id": "toolu_2"})]),
        "messages.2.content.0.tool_use_id",
    ),
    "a tool_result before any call": (
        _with(messages=_user({"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"})),
        "messages.0.content.0.tool_use_id",
    ),
    "a tool_result with an image": (
        _with(
            messages=[
                *USER,
                CALLED,
                *_user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "image"}]}),
            ]
        ),
        "messages.2.content.0.content.0.type",
    ),
    "a tool_use whose input is not an object": (
        _with(messages=[*USER, {"role": "assistant", "content": [{**CALLED["content"][0], "input": "x"}]}]),
        "messages.1.content.0.input",
    ),
    "10k blocks": (_with(messages=_user(*[{"type": "text", "text": "a"}] * 10_000)), "messages.0.content"),
    "a system prompt of images": (_with(system=[{"type": "image"}]), "system.0.type"),
    "a system prompt of a number": (_with(system=3), "system"),
    "a server tool": (_with(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0.type"),
    "a tool without a schema": (_with(tools=[{"name": "look"}]), "tools.0.input_schema"),
    "a tool with a bad name": (_with(tools=[{**TOOL, "name": "a b"}]), "tools.0.name"),
    "two tools of one name": (_with(tools=[TOOL, TOOL]), "tools"),
    "tool_choice any without tools": (_with(tool_choice={"type": "any"}), "tool_choice.type"),
    "tool_choice of an unknown tool": (
        _with(tools=[TOOL], tool_choice={"type": "tool", "name": "fly"}),
        "tool_choice.name",
    ),
    "tool_choice tool without a name": (
        _with(tools=[TOOL], tool_choice={"type": "tool"}),
        "tool_choice.name",
    ),
    "tool_choice of an unknown type": (_with(tools=[TOOL], tool_choice={"type": "some"}), "tool_choice.type"),
    "an empty stop sequence": (_with(stop_sequences=[""]), "stop_sequences"),
    "a negative temperature": (_with(temperature=-1), "temperature"),
    "thinking of an unknown type": (_with(thinking={"type": "deep"}), "thinking.type"),
    "a lone surrogate": (_with(messages=[{"role": "user", "content": "\ud800"}]), "messages"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_is_a_400_naming_the_field(http, name, stream):
    body, field = BAD_BODIES[name]
    _refused(_post(http, "/v1/messages", {**body, "stream": stream}), 400, "invalid_request_error", field)


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in BAD_BODIES
        if n not in ("no max_tokens", "max_tokens 0", "an empty stop sequence", "a negative temperature")
    ],
)
def test_count_tokens_refuses_the_same_input(http, name):
    body, field = BAD_BODIES[name]
    body = {key: value for key, value in body.items() if key != "max_tokens"}
    _refused(_post(http, "/v1/messages/count_tokens", body), 400, "invalid_request_error", field)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (
            b'{"model": "scripted", "max_tokens": 4, "messages": [{"role": "user", "content": "\xff\xfe"}]}',
            "",
        ),
        (b"\xff\xfe\x00", ""),
        (b'{"model": "scripted", "max_tokens": ', ""),
        (b"[1, 2]", ""),
    ],
)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_body_that_is_not_a_json_object_is_a_400(http, content, field, path):
    response = http.post(path, content=content, headers={"content-type": "application/json"})
    _refused(response, 400, "invalid_request_error", field)


def test_other_refusals_in_anthropics_shape(http):
    _refused(http.post("/v1/messages", json=_with(model="claude-x")), 404, "not_found_error", "claude-x")
    _refused(http.get("/v1/messages"), 405, "invalid_request_error")
    big = _with(messages=[{"role": "user", "content": "a" * 1_100_000}])
    _refused(http.post("/v1/messages", json=big), 413, "request_too_large")
    long = _with(messages=[{"role": "user", "content": "word " * 600}])  # past the scripted 512 tokens
    _refused(http.post("/v1/messages", json=long), 400, "invalid_request_error", "context window")


def test_an_error_during_the_stream_is_an_error_event(http, url):
    response = http.post("/v1/messages", json=_with(model="failing", stream=True))
    assert response.status_code == 200
    pairs = frames(response.text)
    names = [name for name, _ in pairs]
    assert names[:2] == ["message_start", "ping"] and names[-1] == "error", names
    for name, payload in pairs[:-1]:
        checked_event(name, payload)
    error = checked_error(pairs[-1][1], "api_error")
    assert "RuntimeError" in error["message"] and "device" not in error["message"]
    sdk = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    with pytest.raises(anthropic.APIStatusError):
        for _ in sdk.messages.create(**_with(model="failing"), stream=True):
            pass
    whole = http.post("/v1/messages", json=_with(model="failing"))
    _refused(whole, 500, "api_error", "RuntimeError")


def test_a_stop_sequence_is_reported(url):
    sdk = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    # (sampling params are not among the arguments of recent SDKs: they go as extra fields)
    greedy = {"extra_body": {"temperature": 0}}
    request = {**_with(max_tokens=200, stop_sequences=["Castle", "never"]), **greedy}
    message = sdk.messages.create(**request)
    checked_message(message.model_dump())
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "Castle"
    assert message.content[0].text == "大阪城は有名です。Osaka "
    with sdk.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", "Castle")
    assert streamed.content[0].text == message.content[0].text
    plain = sdk.messages.create(**_with(max_tokens=200), **greedy)
    assert (plain.stop_reason, plain.stop_sequence) == ("end_turn", None)
    cut = sdk.messages.create(**_with(max_tokens=5), **greedy)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 5


def test_a_reasoning_models_thinking_is_a_thinking_block(http):
    body = _with(
        model="thinker", max_tokens=200, temperature=0, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    response = http.post("/v1/messages", json={**body, "stream": True})
    pairs = frames(response.text)
    message = check_stream(pairs)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "The user greets me. I greet back.\n"
    assert message.content[1].text == "Hello! 🏯 How can I help?"
    deltas = {payload["delta"]["type"] for name, payload in pairs if name == "content_block_delta"}
    assert deltas == {"thinking_delta", "text_delta"}
    whole = checked_message(http.post("/v1/messages", json=body).json())
    assert [b.model_dump(exclude_none=True) for b in whole.content] == [
        {"type": "thinking", "thinking": "The user greets me. I greet back.\n", "signature": ""},
        {"type": "text", "text": "Hello! 🏯 How can I help?"},
    ]
    assert whole.stop_reason == "end_turn"
