"""Every refusal is OpenAI-shaped JSON with the right status, before any stream starts; an error
after streaming began is an error event then [DONE]; the server keeps serving afterwards."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI

from tests.server.conftest import TIMEOUT_S, sse_events, wait_until_idle

MESSAGES = [{"role": "user", "content": "Hi"}]


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


def _chat(model_name: str, **fields) -> dict:
    return {"model": model_name, "messages": MESSAGES, "max_tokens": 2, **fields}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"stop": [""]}, "stop"),
        ({"seed": -5}, "seed"),
        ({"n": 9}, "n"),  # above the server limit (--max-n, 8)
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"presence_penalty": 1.0}, "presence_penalty"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
        ({"stream": True, "stream_options": {"bogus": 1}}, "stream_options.bogus"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),  # null only beside tool_calls
        ({"frobnicate": True}, "frobnicate"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_bad_fields_are_400_naming_the_field(http, model_name, fields, param):
    error = _error(http.post("/v1/chat/completions", json=_chat(model_name, **fields)), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_missing_field_and_bad_json_are_400(http, model_name):
    assert _error(http.post("/v1/chat/completions", json={"model": model_name}), 400)["param"] == "messages"
    bad_json = http.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert _error(bad_json, 400)["type"] == "invalid_request_error"
    assert _error(http.post("/v1/completions", json={"model": model_name, "prompt": ["a", "b"]}), 400)[
        "param"
    ] == ("prompt")


def test_unknown_model_is_404(http, client, model_name):
    error = _error(http.post("/v1/chat/completions", json=_chat("gpt-4o")), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model" and model_name in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    assert _error(http.get("/v1/models/nope"), 404)["code"] == "model_not_found"


def test_unknown_route_and_method_are_openai_shaped(http):
    assert _error(http.get("/v2/everything"), 404)["code"] == "not_found"
    assert _error(http.get("/v1/chat/completions"), 405)["type"] == "invalid_request_error"


def test_prompt_longer_than_the_context_is_400_context_length_exceeded(http, model_name):
    long_prompt = "hello " * 5000  # about 5000 tokens; the context is 4096
    for stream in (False, True):
        response = http.post(
            "/v1/completions", json={"model": model_name, "prompt": long_prompt, "stream": stream}
        )
        error = _error(response, 400)
        assert error["code"] == "context_length_exceeded"


def test_lone_surrogate_is_400(http, model_name):
    body = json.dumps({"model": model_name, "messages": [{"role": "user", "content": "\ud800"}]})
    response = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert _error(response, 400)["param"] == "messages"


def test_body_larger_than_the_limit_is_413(start_server, model_name):
    with (
        start_server(max_body_bytes=1000) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        big = _chat(model_name, messages=[{"role": "user", "content": "x" * 2000}])
        assert _error(http.post("/v1/chat/completions", json=big), 413)["code"] == "request_too_large"

        def chunked():  # no Content-Length: the limit is counted while reading
            yield b'{"model": "m", "prompt": "'
            for _ in range(10):
                yield b"y" * 200
            yield b'"}'

        response = http.post(
            "/v1/completions", content=chunked(), headers={"content-type": "application/json"}
        )
        assert _error(response, 413)["code"] == "request_too_large"
        assert http.post("/v1/chat/completions", json=_chat(model_name)).status_code == 200


def test_api_key_guards_every_route_but_health_and_ping(start_server, model_name):
    with start_server(api_key="s3cret") as server:
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            for method, path in [
                ("GET", "/v1/models"),
                ("GET", "/metrics"),
                ("GET", "/version"),
                ("POST", "/v1/chat/completions"),
                ("POST", "/invocations"),
                ("GET", "/openapi.json"),
                ("GET", "/nowhere"),
            ]:
                response = http.request(method, path, json={})
                error = _error(response, 401)
                assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
                assert response.headers["www-authenticate"] == "Bearer"
            wrong = http.get("/v1/models", headers={"Authorization": "Bearer s3cre7"})
            assert _error(wrong, 401)["code"] == "invalid_api_key"
            assert http.get("/health").status_code == 200 and http.get("/ping").status_code == 200
            assert http.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200

        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
        keyed = OpenAI(base_url=f"{server.url}/v1", api_key="s3cret", max_retries=0, timeout=TIMEOUT_S)
        assert keyed.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=2).choices


def test_timeout_mid_stream_is_an_error_event_then_done(start_server, model_name):
    # a schema no answer can meet within the time limit: the grammar forbids ending early on any build
    endless = {"name": "numbers", "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 1000}}
    counting = {"model": model_name, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 2000, "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": endless}}  # fmt: skip
    with (
        start_server(request_timeout_s=3.0) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        events = sse_events(http.post("/v1/completions", json={**counting, "stream": True}).text)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "timeout" and error["type"] == "timeout_error"
        assert all("choices" in json.loads(e) for e in events[:-2])
        wait_until_idle(http)  # the timed-out generation stops within a token and frees its place

        assert _error(http.post("/v1/completions", json=counting), 504)["code"] == "timeout"

        wait_until_idle(http)
        short = http.post("/v1/completions", json={**counting, "max_tokens": 1})  # still serving
        assert short.status_code == 200 and short.json()["usage"]["completion_tokens"] == 1
