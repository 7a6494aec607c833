"""The OpenAPI document describes what the server does; `llmflow serve` starts a real server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from llmflow.cli import app as cli
from llmflow.cli.common import parse_assignments
from llmflow.errors import InvalidParams
from tests.server.conftest import TIMEOUT_S, wait_healthy


def test_openapi_lists_every_route_with_its_bodies_and_errors(http):
    doc = http.get("/openapi.json").json()
    paths = doc["paths"]
    assert {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/invocations",
        "/health",
        "/ping",
        "/version",
        "/metrics",
    } <= set(paths)

    chat = paths["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "ChatCompletionRequest"
    )
    assert {"application/json", "text/event-stream"} <= set(chat["responses"]["200"]["content"])
    for status in ("400", "401", "404", "413", "429", "503", "504"):
        assert chat["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
            "ErrorResponse"
        )
    assert "422" not in chat["responses"]  # validation errors are 400s

    request = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert request["additionalProperties"] is False
    assert {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "n",
    } <= set(request["properties"])

    invocations = paths["/invocations"]["post"]
    assert {"application/json", "text/csv", "application/vnd.apache.parquet"} <= set(
        invocations["requestBody"]["content"]
    )
    assert "security" not in doc  # no API key on this server


def test_openapi_declares_the_bearer_key_when_there_is_one(start_server):
    with start_server(api_key="k") as server:
        doc = httpx.get(f"{server.url}/openapi.json", headers={"Authorization": "Bearer k"}).json()
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert doc["paths"]["/health"]["get"]["security"] == []


def test_version(http, model_name, served_llm):
    import mlflow

    import llmflow

    assert http.get("/version").json() == {
        "llmflow": llmflow.__version__,
        "mlflow": mlflow.__version__,
        "model": model_name,
        "engine": served_llm.engine_name,
    }


def test_engine_options_parse_as_json_values():
    assert parse_assignments(["n_threads=2", "verbose=false", "name=x"], "--engine-option") == {
        "n_threads": 2,
        "verbose": False,
        "name": "x",
    }
    with pytest.raises(InvalidParams):
        parse_assignments(["n_threads"], "--engine-option")


def test_serve_help_and_bad_options():
    runner = CliRunner()
    assert "--api-key" in runner.invoke(cli, ["serve", "--help"]).output
    result = runner.invoke(cli, ["serve", "--engine-option", "oops"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    assert runner.invoke(cli, ["serve", "--parallel", "0"]).exit_code == 2
    result = runner.invoke(cli, ["serve", "--engine", "llama_cpp", "--parallel", "2"])
    assert result.exit_code == 2 and "one generation at a time" in result.output
    result = runner.invoke(cli, ["serve", "--switch-interval", "0"])
    assert result.exit_code == 2 and "--switch-interval" in result.output


def test_a_foreground_server_sets_the_switch_interval_of_its_process(monkeypatch):
    """`llmflow serve --switch-interval MS` owns its process, so it may set the GIL switch
    interval; without the option Python's own stays."""
    from types import SimpleNamespace

    from llmflow.server import uvicorn_server

    served = []
    monkeypatch.setattr(
        uvicorn_server,
        "_server",
        lambda *a, **k: SimpleNamespace(run=lambda: served.append(sys.getswitchinterval())),
    )
    state = SimpleNamespace(settings=SimpleNamespace(shutdown_grace_s=1.0), end_generations=lambda: None)
    app = SimpleNamespace(state=SimpleNamespace(llmflow=state))
    before = sys.getswitchinterval()
    try:
        uvicorn_server.run(app, "127.0.0.1", 0)
        uvicorn_server.run(app, "127.0.0.1", 0, switch_interval_ms=0.5)
    finally:
        sys.setswitchinterval(before)
    assert served == [before, pytest.approx(0.0005)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llmflow_serve_runs_a_server_with_the_key_from_the_environment(tmp_path):
    port = _free_port()
    env = {**os.environ, "LLMFLOW_API_KEY": "from-env"}
    command = [
        sys.executable,
        "-m",
        "llmflow",
        "serve",
        "--port",
        str(port),
        "--model-name",
        "smol",
        "--engine-option",
        "n_ctx=512",
        "--parallel",
        "3",
        "--switch-interval",
        "0.5",
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url)
        assert httpx.get(f"{url}/v1/models").status_code == 401
        body = {"model": "smol", "prompt": "Hi", "max_tokens": 2}
        answer = httpx.post(
            f"{url}/v1/completions",
            json=body,
            headers={"Authorization": "Bearer from-env"},
            timeout=TIMEOUT_S,
        )
        assert answer.status_code == 200 and answer.json()["model"] == "smol"
        version = httpx.get(f"{url}/version", headers={"Authorization": "Bearer from-env"}).json()
        assert version["engine"] == "llama_cpp_batched"  # a server batches concurrent requests
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer from-env"}).text
        assert 'llmflow_engine_free_sequences{model="smol"} 3.0' in metrics  # --parallel 3, all free again
    finally:
        process.terminate()
        process.wait(30)
