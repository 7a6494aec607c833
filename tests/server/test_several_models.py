"""Several models in one server: each under its name, every route resolving `model` the same way,
each with its own queue, loaded at start or at first use, unloaded when idle.

The models are the embedded GGUF under two names, on the one-at-a-time engine and on the batching
engine (1 thread each). No test depends on the text a model answers (greedy answers differ
between CPU builds): which model served a request is read from /metrics and the answers' `model`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI
from typer.testing import CliRunner

from llmflow.cli import app as cli
from llmflow.cli.serve import model_configs
from llmflow.errors import InvalidParams
from llmflow.model_files import default_model_path
from llmflow.server.model_config import ModelConfig, read_config_file
from llmflow.server.uvicorn_server import BackgroundServer
from tests.server.conftest import TIMEOUT_S, metric, running, sse_events, wait_healthy, wait_until_idle

SOLO = ModelConfig(name="solo", engine="llama_cpp", threads=1)
BATCH = ModelConfig(name="batch", engine="llama_cpp_batched", threads=1, parallel=2)
HI = [{"role": "user", "content": "Hi"}]
#: a stream that runs to max_tokens whatever the model samples: the constraint never allows EOS before
LONG = {"prompt": "Count: 1\n2\n3\n", "regex": "[0-9\n]{3000}"}


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    """Both models in one server; conftest's `http` and `client` talk to it."""
    with running([SOLO, BATCH]) as two:
        yield two


def generated(http: httpx.Client) -> dict[str, float]:
    text = http.get("/metrics").text
    return {name: metric(text, "llmflow_generation_tokens_total", model=name) for name in ("solo", "batch")}


# -- routing -----------------------------------------------------------------------------------------
def test_every_model_is_listed(client, http):
    assert [model.id for model in client.models.list()] == ["solo", "batch"]
    assert client.models.retrieve("batch").id == "batch"
    assert http.get("/version").json()["model"] == "solo"  # the default: the first


def test_streamed_chat_goes_to_the_model_it_names(client, http):
    for name in ("solo", "batch"):
        wait_until_idle(http)
        before = generated(http)
        chunks = list(
            client.chat.completions.create(
                model=name,
                messages=HI,
                max_tokens=5,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert {chunk.model for chunk in chunks} == {name}
        tokens = chunks[-1].usage.completion_tokens
        wait_until_idle(http)
        after = generated(http)
        other = "batch" if name == "solo" else "solo"
        assert after[name] == before[name] + tokens and after[other] == before[other]
    text = http.get("/metrics").text
    # each under its own engine: only the batching one reports sequences
    assert metric(text, "llmflow_engine_sequences", model="batch") == 2
    assert 'llmflow_engine_sequences{model="solo"}' not in text
    assert (
        metric(text, "llmflow_requests_total", endpoint="/v1/chat/completions", status="200", model="solo")
        >= 1
    )


def test_an_unknown_model_is_a_404_naming_model(client, http):
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="nope", messages=HI, max_tokens=2)
    error = refused.value.body
    assert error["param"] == "model" and error["code"] == "model_not_found"
    assert "'solo', 'batch'" in error["message"]
    for path, body in (
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
        ("/v1/embeddings", {"input": "Hi"}),
        ("/v1/responses", {"input": "Hi"}),
        ("/responses", {"input": [{"role": "user", "content": "Hi"}]}),
        ("/tokenize", {"content": "Hi"}),
        ("/detokenize", {"tokens": [1]}),
    ):
        answer = http.post(path, json={**body, "model": "nope"})
        assert answer.status_code == 404 and answer.json()["error"]["param"] == "model", path
    assert http.get("/v1/models/nope").status_code == 404


def test_every_route_resolves_model_the_same_way(client, http):
    for name in ("solo", "batch"):
        assert client.completions.create(model=name, prompt="Hi", max_tokens=2).model == name
        assert client.responses.create(model=name, input="Hi", max_output_tokens=2).model == name
        agent = {"model": name, "input": [{"role": "user", "content": "Hi"}], "max_output_tokens": 2}
        wait_until_idle(http)
        before = generated(http)
        answer = http.post("/responses", json=agent)  # MLflow AgentServer's route
        assert answer.status_code == 200 and answer.json()["model"] == name
        wait_until_idle(http)
        assert generated(http)[name] > before[name]
        tokens = http.post("/tokenize", json={"model": name, "content": "Hello"}).json()["tokens"]
        assert http.post("/detokenize", json={"model": name, "tokens": tokens}).json() == {"content": "Hello"}
        embedded = http.post("/v1/embeddings", json={"model": name, "input": "Hi"})
        assert embedded.status_code == 400 and embedded.json()["error"]["param"] == "model"  # cannot pool
    # no model: the default one
    assert http.post("/tokenize", json={"content": "Hello"}).json()["tokens"] == tokens
    agent = {"input": [{"role": "user", "content": "Hi"}], "max_output_tokens": 2}
    assert http.post("/responses", json=agent).json()["model"] == "solo"
    refused = http.post("/responses", json={**agent, "model": 7})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"


def test_invocations_go_to_the_first_model_and_serving_endpoints_by_name(http):
    body = {"prompt": "Hi", "max_tokens": 3, "stream": True}
    for path, name in (
        ("/invocations", "solo"),
        ("/serving-endpoints/batch/invocations", "batch"),
        ("/serving-endpoints/solo/invocations", "solo"),
    ):
        wait_until_idle(http)
        before = generated(http)
        answer = http.post(path, json=body)
        assert answer.status_code == 200 and sse_events(answer.text)[-1] == "[DONE]"
        wait_until_idle(http)
        after = generated(http)
        assert after[name] > before[name], path
        assert sum(after.values()) - sum(before.values()) == after[name] - before[name]
    missing = http.post("/serving-endpoints/nope/invocations", json=body)
    assert missing.status_code == 404
    assert "no serving endpoint 'nope'" in missing.json()["message"]  # Databricks' shape


def test_each_model_has_its_own_queue():
    solo = SOLO.model_copy(update={"max_running": 1, "max_queue": 0})
    with running([solo, BATCH]) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        body = {"model": "solo", **LONG, "max_tokens": 1500, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()  # held: a closed iterator would close the stream
            next(lines)  # solo's only place is taken
            assert metric(http.get("/metrics").text, "llmflow_num_requests_running", model="solo") == 1
            short = {**body, "stream": False, "max_tokens": 2}
            assert http.post("/v1/completions", json=short).status_code == 429
            other = http.post("/v1/completions", json={**short, "model": "batch"})
            assert other.status_code == 200  # batch has places of its own


# -- lazy loading, unloading -------------------------------------------------------------------------
def loaded(http: httpx.Client, name: str) -> tuple[float, float]:
    """(loaded now, loads so far) of `name`."""
    text = http.get("/metrics").text
    return metric(text, "llmflow_model_loaded", model=name), metric(
        text, "llmflow_model_loads_total", model=name
    )


def wait_for(condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_lazy_models_load_once_at_first_use_and_unload_when_idle():
    with (
        running([SOLO, BATCH], lazy=True, idle_unload_s=1.0) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        assert loaded(http, "solo") == (0, 0) and loaded(http, "batch") == (0, 0)
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == [
            "solo",
            "batch",
        ]  # listed unloaded
        answers: list[int] = []

        def ask() -> None:
            body = {"model": "batch", "prompt": "Hi", "max_tokens": 2}
            answers.append(
                httpx.post(f"{server.url}/v1/completions", json=body, timeout=TIMEOUT_S).status_code
            )

        first = [threading.Thread(target=ask) for _ in range(3)]
        for thread in first:
            thread.start()
        for thread in first:
            thread.join()
        assert answers == [200, 200, 200]
        assert loaded(http, "batch")[1] == 1  # three first requests, one load
        assert loaded(http, "solo") == (0, 0)
        wait_for(lambda: loaded(http, "batch")[0] == 0)  # idle for a second: unloaded
        assert metric(http.get("/metrics").text, "llmflow_model_unloads_total", model="batch") == 1
        again = http.post("/v1/completions", json={"model": "batch", "prompt": "Hi", "max_tokens": 2})
        assert again.status_code == 200 and loaded(http, "batch")[1] == 2


def test_a_model_in_use_is_never_unloaded():
    with (
        running([SOLO], lazy=True, idle_unload_s=0.2) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        body = {"model": "solo", **LONG, "max_tokens": 1000, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            started = time.monotonic()
            while time.monotonic() - started < 1.5:  # many idle timeouts long
                assert next(lines) is not None
                assert loaded(http, "solo")[0] == 1
        wait_for(lambda: loaded(http, "solo")[0] == 0)


def test_beyond_max_loaded_the_least_recently_used_idle_model_is_unloaded():
    with (
        running([SOLO, BATCH], lazy=True, max_loaded=1) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        for name, other in (("solo", "batch"), ("batch", "solo"), ("solo", "batch")):
            answer = http.post("/v1/completions", json={"model": name, "prompt": "Hi", "max_tokens": 2})
            assert answer.status_code == 200 and loaded(http, name)[0] == 1
            wait_for(lambda other=other: loaded(http, other)[0] == 0)  # idle once its answer is over
        assert loaded(http, "solo")[1] == 2


# -- the memory budget ------------------------------------------------------------------------------
#: the embedded GGUF under three names, each with a small context: about 103 MiB each once loaded
#: (92 MiB of weights, 11 MiB of KV cache), 94 MiB of weights on disk before a first load
SMALL = [
    ModelConfig(name=name, engine="llama_cpp", threads=1, engine_options={"n_ctx": 512})
    for name in ("a", "b", "c")
]


def memory(http: httpx.Client) -> dict[str, float]:
    text = http.get("/metrics").text
    return {name: metric(text, "llmflow_model_memory_bytes", model=name) for name in ("a", "b", "c")}


def test_beyond_max_memory_the_least_recently_used_idle_models_are_unloaded():
    budget = 250_000_000  # two of them, not three
    with (
        running(SMALL, lazy=True, max_memory="250MB") as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        llm_bytes = None
        for name, unloaded in (("a", ""), ("b", ""), ("c", "a"), ("a", "b")):
            answer = http.post("/v1/completions", json={"model": name, "prompt": "Hi", "max_tokens": 2})
            assert answer.status_code == 200 and loaded(http, name)[0] == 1
            sizes = memory(http)
            llm_bytes = llm_bytes or sizes[name]
            assert sizes[name] == llm_bytes > 100 << 20  # the engine's estimate: weights and KV cache
            assert sum(sizes.values()) <= budget
            if unloaded:
                assert loaded(http, unloaded)[0] == 0 and sizes[unloaded] == 0
        assert [loaded(http, name)[1] for name in ("a", "b", "c")] == [2, 1, 1]


def test_a_model_in_use_is_never_unloaded_for_memory():
    with (
        running(SMALL[:2], lazy=True, max_memory="150MB") as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        body = {"model": "a", **LONG, "max_tokens": 1000, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()  # held: a closed iterator would close the stream
            next(lines)  # a streams
            short = {"model": "b", "prompt": "Hi", "max_tokens": 2}
            assert http.post("/v1/completions", json=short).status_code == 200  # loaded anyway
            assert loaded(http, "b") == (1, 1)
            # over the budget: the reaper unloads the idle one, never the streaming one
            wait_for(lambda: loaded(http, "b")[0] == 0)
            assert loaded(http, "a")[0] == 1 and next(lines) is not None


def test_a_model_larger_than_max_memory_is_refused_naming_model():
    with (
        running(SMALL[:1], lazy=True, max_memory="100MB") as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        for _ in range(2):  # the first learns its size by loading it; the second never loads it
            answer = http.post("/v1/completions", json={"model": "a", "prompt": "Hi", "max_tokens": 2})
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["param"] == "model" and error["code"] == "model_too_large"
            assert "--max-memory" in error["message"] and "'a' needs about" in error["message"]
        assert loaded(http, "a") == (0, 1)


def test_max_memory_on_the_command_line(tmp_path):
    gguf = str(default_model_path())
    runner = CliRunner()
    for bad in ("8XB", "-1G", "0", "lots"):
        result = runner.invoke(cli, ["serve", gguf, "--max-memory", bad])
        assert result.exit_code == 2 and "--max-memory" in result.output, result.output
        assert "not a size" in result.output or "more than 0" in result.output
    # weights alone over the budget: refused at start, before the model loads
    result = runner.invoke(cli, ["serve", gguf, "--max-memory", "50MB"])
    assert result.exit_code == 2 and "needs about 93.8 MiB" in result.output, result.output


# -- the command line and config files ---------------------------------------------------------------
YAML = """
models:
  - name: solo
    engine: llama_cpp
    threads: 1
    max_queue: 4
  - name: batch
    engine: llama_cpp_batched
    engine_options: {n_ctx: 512}
    parallel: 2
    threads: 1
"""

TOML = """
[[models]]
name = "solo"
engine = "llama_cpp"
threads = 1

[[models]]
name = "batch"
engine = "llama_cpp_batched"
parallel = 2
threads = 1
engine_options = { n_ctx = 512 }
"""


@pytest.mark.parametrize(("suffix", "text"), [(".yaml", YAML), (".toml", TOML)])
def test_a_config_file_names_each_model(tmp_path, suffix, text):
    path = tmp_path / f"models{suffix}"
    path.write_text(text)
    solo, batch = read_config_file(path)
    assert (solo.name, solo.engine, solo.threads) == ("solo", "llama_cpp", 1)
    assert (batch.name, batch.parallel, batch.engine_options) == ("batch", 2, {"n_ctx": 512})
    # the command line's options apply where an entry says nothing
    defaults = {"engine": None, "engine_options": {"n_ctx": 256, "seed": 1}, "parallel": None, "threads": 2}
    solo, batch = model_configs([], path, None, defaults)
    assert solo.engine_options == {"n_ctx": 256, "seed": 1} and solo.threads == 1
    assert batch.engine_options == {"n_ctx": 512, "seed": 1}


def test_bad_config_files_are_named_errors(tmp_path):
    for text, expected in (
        ("models:\n  - name: a\n    parallel: 0\n", "models[0].parallel"),
        ("models:\n  - nmae: a\n", "models[0].nmae"),
        ("models: []\n", "non-empty list"),
        ("models:\n  - name: a\n  - name: a\n", "'a' names two models"),
    ):
        path = tmp_path / "models.yaml"
        path.write_text(text)
        with pytest.raises(InvalidParams, match=expected.replace("[", r"\[").replace("]", r"\]")):
            model_configs(
                [], path, None, {"engine": None, "engine_options": {}, "parallel": None, "threads": None}
            )


def test_duplicate_names_are_a_cli_error_before_anything_loads(tmp_path):
    gguf = str(default_model_path())
    runner = CliRunner()
    result = runner.invoke(cli, ["serve", gguf, gguf])
    assert result.exit_code == 2 and "names two models" in result.output
    result = runner.invoke(cli, ["serve", gguf, gguf, "--model-name", "x"])
    assert result.exit_code == 2 and "model_name" in result.output
    path = tmp_path / "models.toml"
    path.write_text('[[models]]\nname = "a"\n[[models]]\nname = "a"\n')
    result = runner.invoke(cli, ["serve", "--config", str(path)])
    assert result.exit_code == 2 and "'a' names two models" in result.output
    result = runner.invoke(cli, ["serve", gguf, "--config", str(path)])
    assert result.exit_code == 2 and "not both" in result.output


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llmflow_serve_with_a_config_file(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(TOML)
    port = _free_port()
    command = [sys.executable, "-m", "llmflow", "serve", "--config", str(path), "--lazy", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--log-level", "warning"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url)
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
        assert [model.id for model in client.models.list()] == ["solo", "batch"]
        for name in ("batch", "solo"):
            chunks = list(client.chat.completions.create(model=name, messages=HI, max_tokens=3, stream=True))
            assert {chunk.model for chunk in chunks} == {name}
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, "llmflow_model_loaded", model="solo") == 1
        assert metric(text, "llmflow_engine_sequences", model="batch") == 2
    finally:
        process.terminate()
        process.wait(30)
