"""Reading OpenAI-compatible stream events: what real servers send, and what they must not."""

from __future__ import annotations

import json

import pytest

from llmflow.bench.openai_chunks import StreamDelta, StreamErrorEvent, error_message, parse_event
from llmflow.bench.sse import MalformedSSE, SSEEvent


def event(data, kind: str = "message") -> SSEEvent:
    return SSEEvent(data if isinstance(data, str) else json.dumps(data), kind, 0.0)


def choice(**fields) -> dict:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, **fields}]}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (choice(delta={"role": "assistant"}), StreamDelta()),
        (choice(delta={"content": "Hi"}), StreamDelta("Hi")),
        (choice(delta={"content": None}), StreamDelta()),
        (choice(delta={"content": ""}), StreamDelta()),  # vLLM's empty chunks
        (choice(delta={"reasoning_content": "hm", "content": "A"}), StreamDelta("hmA")),
        (choice(delta={}, finish_reason="length"), StreamDelta("", "length")),
        (choice(text=" completion"), StreamDelta(" completion")),  # /v1/completions
        (
            {"id": "x", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
            StreamDelta("", None, 9, 4),
        ),
        ({"id": "x", "choices": [], "usage": None}, StreamDelta()),
    ],
)
def test_deltas(data, expected):
    assert parse_event(event(data)) == expected


def test_done_ends_the_stream():
    assert parse_event(event("[DONE]")) is None


@pytest.mark.parametrize(
    ("data", "kind", "message"),
    [
        (
            {"error": {"message": "boom", "type": "server_error", "code": "internal"}},
            "message",
            "boom (internal)",
        ),
        ({"error": "overloaded", "error_type": "overloaded"}, "message", "overloaded"),  # TGI
        ({"message": "bad thing"}, "error", "bad thing"),
    ],
)
def test_error_events(data, kind, message):
    with pytest.raises(StreamErrorEvent, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_event(event(data, kind))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"choices": "nope"}', "not a list"),
        ('{"choices": [3]}', "not an object"),
        ('{"hello": "world"}', "neither a chunk nor usage"),
    ],
)
def test_malformed_data(data, match):
    with pytest.raises(MalformedSSE, match=match):
        parse_event(event(data))


def test_error_message_of_fastapi_validation_errors():
    assert "field required" in error_message({"detail": [{"msg": "field required"}]})
