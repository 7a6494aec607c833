"""logprobs on chat and text completions, streamed and whole, in OpenAI's shapes, on both
llama.cpp engines (official client and raw HTTP); and from the MLflow model with details."""

from __future__ import annotations

import math

from llmflow.mlflow import LlmflowPyfuncModel

HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
GREEDY = {"max_tokens": 8, "temperature": 0}


def _check_entry(entry, top):
    assert entry.logprob <= 0.0
    assert len(entry.top_logprobs) == top
    values = [t.logprob for t in entry.top_logprobs]
    assert values == sorted(values, reverse=True)
    assert math.fsum(math.exp(v) for v in values) <= 1.0 + 1e-6
    for t in [entry, *entry.top_logprobs]:
        assert bytes(t.bytes).decode("utf-8", errors="replace") == t.token


def test_chat_logprobs_whole(client, model_name):
    answer = client.chat.completions.create(
        model=model_name, messages=HELLO, logprobs=True, top_logprobs=3, **GREEDY
    )
    choice = answer.choices[0]
    entries = choice.logprobs.content

    ended_by_eos = choice.finish_reason == "stop"
    assert len(entries) == answer.usage.completion_tokens - (1 if ended_by_eos else 0)
    for entry in entries:
        _check_entry(entry, 3)
        # greedy: the chosen token is the most likely one
        assert entry.token == entry.top_logprobs[0].token
        assert abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-6
    assert b"".join(bytes(e.bytes) for e in entries).decode() == choice.message.content


def test_chat_logprobs_streamed(client, model_name):
    stream = client.chat.completions.create(
        model=model_name,
        messages=HELLO,
        logprobs=True,
        top_logprobs=2,
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=12,
        temperature=0.9,
        seed=7,
    )
    chunks = list(stream)
    text, entries = "", []
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            assert chunk.choices[0].logprobs is not None  # each text chunk carries its tokens
            entries += chunk.choices[0].logprobs.content
    for entry in entries:
        _check_entry(entry, 2)
    assert b"".join(bytes(e.bytes) for e in entries).decode() == text
    usage = chunks[-1].usage
    assert usage.completion_tokens - 1 <= len(entries) <= usage.completion_tokens


def test_completions_logprobs(http, model_name):
    body = {"model": model_name, "prompt": "The capital of France is", "logprobs": 3, **GREEDY}
    whole = http.post("/v1/completions", json=body).json()
    logprobs = whole["choices"][0]["logprobs"]

    n = len(logprobs["tokens"])
    assert n >= 1 and len(logprobs["token_logprobs"]) == len(logprobs["top_logprobs"]) == n
    assert "".join(logprobs["tokens"]) == whole["choices"][0]["text"]
    assert logprobs["text_offset"] == sorted(logprobs["text_offset"]) and logprobs["text_offset"][0] == 0
    assert all(1 <= len(top) <= 3 for top in logprobs["top_logprobs"])
    streamed = http.post("/v1/completions", json={**body, "stream": True}).text
    assert '"token_logprobs"' in streamed


def test_logprobs_come_from_the_model_distribution_not_the_sampling_one(client, model_name):
    """Raw logprobs: the same whatever the temperature and filters (vLLM's raw_logprobs)."""
    first = []
    for sampling in ({"temperature": 0}, {"temperature": 1.7, "seed": 3, "extra_body": {"top_k": 2}}):
        answer = client.chat.completions.create(
            model=model_name, messages=HELLO, logprobs=True, top_logprobs=5, max_tokens=1, **sampling
        )
        first.append(
            [(t.token, round(t.logprob, 4)) for t in answer.choices[0].logprobs.content[0].top_logprobs]
        )
    assert first[0] == first[1]


def test_no_logprobs_unless_asked(client, model_name):
    answer = client.chat.completions.create(model=model_name, messages=HELLO, max_tokens=2)
    assert answer.choices[0].logprobs is None
    chunks = list(client.chat.completions.create(model=model_name, messages=HELLO, max_tokens=2, stream=True))
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices)


def test_bad_logprobs_are_a_400_naming_the_field(http, model_name):
    chat = {"model": model_name, "messages": HELLO, "max_tokens": 2}
    cases = [
        ("/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ("/v1/chat/completions", {**chat, "top_logprobs": 2}, "top_logprobs"),
        ("/v1/completions", {"model": model_name, "prompt": "Hi", "logprobs": 21}, "logprobs"),
    ]
    for path, body, field in cases:
        for stream in (False, True):
            answer = http.post(path, json={**body, "stream": stream})
            assert answer.status_code == 400, (body, answer.text)
            assert answer.headers["content-type"] == "application/json"
            assert answer.json()["error"]["param"] == field


def test_the_mlflow_model_returns_logprobs_with_details(embedded_llm):
    model = LlmflowPyfuncModel.from_llm(embedded_llm)
    params = {"details": True, "logprobs": 2, "max_tokens": 4, "temperature": 0.0}
    [answer] = model.predict(None, {"prompt": "Hi"}, params=params)
    chunks = list(model.predict_stream(None, {"prompt": "Hi"}, params=params))

    assert 1 <= len(answer["logprobs"]) <= 4
    assert all(len(e["top_logprobs"]) == 2 and e["logprob"] <= 0 for e in answer["logprobs"])
    assert b"".join(bytes(e["bytes"]) for e in answer["logprobs"]).decode() == answer["content"]
    assert sum(len(c.get("logprobs", [])) for c in chunks) == len(answer["logprobs"])
