"""Every limit the server enforces, each answered with an OpenAI-shaped 4xx (or a clean end)."""

from __future__ import annotations

import json

import httpx
import pytest

from llmflow.params import MAX_STOP_STRINGS
from llmflow.prompts import MAX_MESSAGES
from tests.server.conftest import TIMEOUT_S, running, sse_events


def assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


@pytest.fixture(scope="module")
def small(served_llm):
    """A server with small limits: a 64 KiB body, a 1 s time limit."""
    yield from _client(served_llm, max_body_bytes=64 * 1024, request_timeout_s=1.0)


def chat(content: str = "Hi", **extra) -> dict:
    return {"model": "x", "messages": [{"role": "user", "content": content}], "max_tokens": 2, **extra}


def test_body_larger_than_the_limit_is_413(small):
    response = small.post("/v1/chat/completions", json=chat("a" * 70_000))
    assert_openai_error(response, 413, "request_too_large")


def test_chunked_body_larger_than_the_limit_is_413(small):
    def parts():
        for _ in range(100):
            yield b"x" * 1024

    response = small.post(
        "/v1/chat/completions", content=parts(), headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 413, "request_too_large")


def test_prompt_longer_than_the_context_is_400(http_default, served_llm):
    n_ctx = served_llm.llm.engine.n_ctx
    response = http_default.post(
        "/v1/completions", json={"model": "x", "prompt": "hello " * n_ctx, "max_tokens": 2}
    )
    assert_openai_error(response, 400, "context_length_exceeded")


@pytest.fixture(scope="module")
def small_context():
    """A 256-token context, so that filling it takes a moment."""
    from llmflow import LLM
    from llmflow.server import ServedModel

    llm = LLM.load(engine_options={"n_ctx": 256})
    for http in _client(ServedModel.from_llm(llm)):
        yield http, llm
    llm.close()


def test_max_tokens_beyond_the_context_is_clamped_and_ends_with_length(small_context):
    """Documented choice: max_tokens larger than what is left of the context is not an error
    (OpenAI rejects it); generation stops when the context is full, with finish_reason "length"."""
    http, llm = small_context
    n_ctx = llm.engine.n_ctx
    prompt_tokens = len(llm.engine.tokenize("word " * (n_ctx - 6)))
    room = n_ctx - prompt_tokens
    assert 0 < room < 16
    body = {"model": "x", "prompt": "word " * (n_ctx - 6), "max_tokens": 10 * n_ctx, "temperature": 0}
    response = http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["usage"]["completion_tokens"] <= room
    # a full context ends with "length"; only the model's own end of turn ends sooner
    expected = "length" if answer["usage"]["completion_tokens"] == room else "stop"
    assert answer["choices"][0]["finish_reason"] == expected


def test_too_many_messages_is_400(small):
    messages = [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)
    response = small.post("/v1/chat/completions", json={"model": "x", "messages": messages, "max_tokens": 1})
    assert_openai_error(response, 400)


def test_too_many_stop_strings_is_400(small):
    response = small.post(
        "/v1/chat/completions", json=chat(stop=[f"s{i}" for i in range(MAX_STOP_STRINGS + 1)])
    )
    error = assert_openai_error(response, 400)
    assert error["param"] == "stop"


def test_too_long_stop_string_is_400(small):
    response = small.post("/v1/chat/completions", json=chat(stop=["x" * 10_000]))
    assert assert_openai_error(response, 400)["param"] == "stop"


#: about 3,000 prompt tokens: computing them takes several seconds on a CPU, far past the 1 s limit,
#: so the limit fires whatever the model would answer
SLOW_PROMPT = "word " * 3000


def test_request_timeout_ends_a_stream_with_an_error_event_and_done(small):
    body = chat(SLOW_PROMPT, max_tokens=100_000, stream=True, temperature=1.0)
    with small.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        raw = response.read().decode()
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["type"] == "timeout_error", events[-2]


def test_request_timeout_without_stream_is_504(small):
    body = chat(SLOW_PROMPT, max_tokens=100_000, temperature=1.0, seed=1)
    response = small.post("/v1/chat/completions", json=body)
    assert_openai_error(response, 504)


@pytest.fixture(scope="module")
def http_default(served_llm):
    yield from _client(served_llm)


def _client(served_llm, **settings):
    with running(served_llm, model_name="x", **settings) as server:
        url = server.url
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as http:
            yield http
