"""The OpenAI routes with the official client and raw HTTP, on the embedded model."""

from __future__ import annotations

import json

from tests.server.conftest import sse_events

HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
GREEDY = {"max_tokens": 24, "temperature": 0}


def _greedy_chat(client, model_name, **extra):
    """A greedy answer to HELLO after the same prompt ran once: llama.cpp reuses the cached prompt
    prefix, and a prompt evaluated in one batch or in two parts can give different greedy tokens,
    so answers are compared in the same cache state."""
    client.chat.completions.create(model=model_name, messages=HELLO, **GREEDY)
    return client.chat.completions.create(model=model_name, messages=HELLO, **GREEDY, **extra)


def _stream_text(stream) -> tuple[str, list]:
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_chat_stream_equals_non_stream_at_temperature_0(client, model_name):
    whole = _greedy_chat(client, model_name)
    text, chunks = _stream_text(
        client.chat.completions.create(model=model_name, messages=HELLO, stream=True, **GREEDY)
    )

    assert text == whole.choices[0].message.content and text
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked
    assert whole.usage.completion_tokens <= 24 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert whole.model == model_name and whole.object == "chat.completion"


def test_completions_stream_equals_non_stream(client, model_name):
    prompt = "The capital of France is"
    client.completions.create(model=model_name, prompt=prompt, **GREEDY)
    whole = client.completions.create(model=model_name, prompt=prompt, **GREEDY)
    chunks = list(client.completions.create(model=model_name, prompt=prompt, stream=True, **GREEDY))

    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason
    ]
    assert whole.object == "text_completion" and whole.usage.completion_tokens > 0


def test_include_usage_sends_a_last_chunk_with_usage(client, model_name):
    whole = _greedy_chat(client, model_name)
    stream = client.chat.completions.create(
        model=model_name, messages=HELLO, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    text, chunks = _stream_text(stream)

    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert text == whole.choices[0].message.content
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
        whole.usage.total_tokens,
    )


def test_sse_bytes_follow_openai_framing(http, model_name):
    body = {
        "model": model_name,
        "messages": HELLO,
        "stream": True,
        "max_tokens": 4,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    response = http.post("/v1/chat/completions", json=body)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert chunks[0]["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    for chunk in chunks[1:-2]:
        (choice,) = chunk["choices"]
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason"}
        assert list(choice["delta"]) == ["content"] and choice["delta"]["content"]
        assert chunk["usage"] is None and chunk["object"] == "chat.completion.chunk"
    assert chunks[-2]["choices"][0]["delta"] == {} and chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_stop_string_ends_the_answer_before_it(client, model_name):
    whole = (
        client.chat.completions.create(model=model_name, messages=HELLO, **GREEDY).choices[0].message.content
    )
    words = whole.split()
    assert len(words) >= 3, whole
    stop = words[2]
    cut = whole[: whole.index(stop)]

    answer = client.chat.completions.create(model=model_name, messages=HELLO, stop=[stop], **GREEDY)
    text, _ = _stream_text(
        client.chat.completions.create(model=model_name, messages=HELLO, stop=stop, stream=True, **GREEDY)
    )

    assert answer.choices[0].message.content == cut == text
    assert answer.choices[0].finish_reason == "stop"
    assert stop not in text


def test_japanese_stream_has_no_empty_delta_and_no_replacement_char(client, model_name):
    stream = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "日本の首都はどこですか。日本語で答えてください。"}],
        stream=True,
        max_tokens=48,
        temperature=0,
    )
    deltas = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].finish_reason is None]

    assert deltas[1:] and all(deltas[1:])  # deltas[0] is the role chunk's ""
    assert "\ufffd" not in "".join(deltas)


def test_max_completion_tokens_and_sampling_params(client, model_name):
    answer = client.chat.completions.create(
        model=model_name, messages=HELLO, max_completion_tokens=3, temperature=0.7, top_p=0.9, seed=7
    )
    again = client.chat.completions.create(
        model=model_name, messages=HELLO, max_completion_tokens=3, temperature=0.7, top_p=0.9, seed=7
    )
    assert answer.usage.completion_tokens == 3 and answer.choices[0].finish_reason == "length"
    assert answer.choices[0].message.content == again.choices[0].message.content  # same seed


def test_models_list_and_get(client, model_name):
    models = client.models.list()
    assert [m.id for m in models.data] == [model_name]
    assert client.models.retrieve(model_name).owned_by == "llmflow"
