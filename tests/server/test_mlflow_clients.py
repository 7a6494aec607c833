"""MLflow's OpenAI integrations against `llmflow serve`: `mlflow.openai.autolog()` around the
`openai` client records traces with token usage, and MLflow's AI Gateway serves it as an
OpenAI provider (chat, streamed and whole)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow.deployments import get_deploy_client
from openai import OpenAI

from tests.extras import need
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, running, wait_healthy

HI = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def llmflow_serve(default_served) -> Iterator[str]:
    """`llmflow serve` that traces nothing itself: the traces are the client's."""
    with running(default_served, tracing=False) as server:
        yield server.url


@pytest.fixture
def experiment(tmp_path) -> Iterator[Store]:
    store = Store.create(tmp_path)
    # as mlflow.set_experiment would, without leaving it chosen for the tests that follow
    with using(store), pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_EXPERIMENT_ID", store.experiment_id)
        yield store


def test_openai_autolog_records_traces_with_token_usage(llmflow_serve, default_served, experiment):
    client = OpenAI(base_url=f"{llmflow_serve}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    mlflow.openai.autolog()
    try:
        whole = client.chat.completions.create(model=default_served.name, messages=HI, max_tokens=4)
        chunks = list(
            client.chat.completions.create(
                model=default_served.name,
                messages=HI,
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        response = client.responses.create(model=default_served.name, input="Say hi.", max_output_tokens=4)
    finally:
        mlflow.openai.autolog(disable=True)
    mlflow.flush_trace_async_logging()
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    assert len(traces) == 3
    by_time = sorted(traces, key=lambda t: t.info.request_time)
    expected = [
        (whole.usage.prompt_tokens, whole.usage.completion_tokens),
        (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens),
        (response.usage.input_tokens, response.usage.output_tokens),
    ]
    for trace, (prompt_tokens, completion_tokens) in zip(by_time, expected, strict=True):
        usage = trace.info.token_usage
        assert (usage["input_tokens"], usage["output_tokens"]) == (prompt_tokens, completion_tokens)
        assert trace.info.state == "OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gateway(config: Path) -> Iterator[str]:
    """`mlflow gateway start` (MLflow's AI Gateway) with `config`, stopped on exit."""
    port = _free_port()
    command = [sys.executable, "-m", "mlflow", "gateway", "start", "--config-path", str(config)]
    command += ["--port", str(port), "--workers", "1"]
    # its own process group: `mlflow gateway start` runs gunicorn as a child, stopped with it
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_mlflow_ai_gateway_with_llmflow_serve_as_an_openai_provider(llmflow_serve, default_served, tmp_path):
    need("slowapi", "gateway")  # `mlflow gateway` exists only with MLflow's gateway extra
    config = tmp_path / "gateway.yaml"
    provider = {
        "provider": "openai",
        "name": default_served.name,
        "config": {"openai_api_key": "unused", "openai_api_base": f"{llmflow_serve}/v1"},
    }
    endpoint = {"name": "local-chat", "endpoint_type": "llm/v1/chat", "model": provider}
    config.write_text(yaml.safe_dump({"endpoints": [endpoint]}))
    with gateway(config) as url:
        client = get_deploy_client(url)
        answer = client.predict(endpoint="local-chat", inputs={"messages": HI, "max_tokens": 4})
        assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] <= 4
        # the gateway streams at its OpenAI-compatible route (its deployments client does not stream)
        openai = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
        chunks = list(
            openai.chat.completions.create(model="local-chat", messages=HI, max_tokens=4, stream=True)
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert text and finishes in (["stop"], ["length"])
