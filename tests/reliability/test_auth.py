"""Access: API key from the command line, the environment or a file, compared in constant time,
never logged; 401 in OpenAI's shape; CORS off unless configured; loopback by default."""

from __future__ import annotations

import inspect

import httpx
import pytest
from serve_process import ServeProcess

from llmflow.cli import serve as serve_cli
from llmflow.server import ServerSettings
from llmflow.server.middleware import ApiKeyMiddleware
from tests.server.conftest import running

KEY = "sk-llmflow-test-9f8e7d6c5b4a"


def _check_access(url: str) -> None:
    assert httpx.get(f"{url}/health").status_code == 200  # public
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.get(f"{url}/v1/models", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        error = response.json()["error"]
        assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
        assert KEY not in response.text
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


@pytest.mark.parametrize("source", ["file", "env"])
def test_key_from_a_file_or_the_environment_and_never_logged(source, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    args = ["--log-level", "debug"] + (["--api-key-file", str(key_file)] if source == "file" else [])
    env = {"LLMFLOW_API_KEY": KEY} if source == "env" else {}
    server = ServeProcess(args, env=env)
    with server:
        _check_access(server.url)
        body = {"model": "x", "prompt": "Hi", "max_tokens": 1}
        httpx.post(f"{server.url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert "GET /v1/models" in server.output  # the log was captured, at debug level
    assert KEY not in server.output


def test_keys_are_compared_in_constant_time():
    assert "hmac.compare_digest" in inspect.getsource(ApiKeyMiddleware._authorized)


def test_cors_is_off_unless_configured(served_llm):
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    with running(served_llm) as server:
        response = httpx.options(f"{server.url}/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in response.headers
        simple = httpx.get(f"{server.url}/health", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in simple.headers
    with running(served_llm, cors_origins=("https://app.example",)) as server:
        allowed = {**preflight, "Origin": "https://app.example"}
        response = httpx.options(f"{server.url}/v1/chat/completions", headers=allowed)
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        response = httpx.options(f"{server.url}/v1/chat/completions", headers=preflight)
        assert response.headers.get("access-control-allow-origin") != "https://evil.example"


def test_loopback_by_default():
    assert ServerSettings().host == "127.0.0.1"
    assert inspect.signature(serve_cli.serve).parameters["host"].default == "127.0.0.1"


def test_warning_when_bound_to_all_interfaces_without_a_key(capsys):
    serve_cli._warn_if_exposed("0.0.0.0", None)
    assert "without an API key" in capsys.readouterr().err
    for host, key in (("0.0.0.0", KEY), ("127.0.0.1", None), ("::1", None)):
        serve_cli._warn_if_exposed(host, key)
        assert capsys.readouterr().err == ""
