"""Fixtures of the benchmark tests: real streaming servers on 127.0.0.1 that stop themselves."""

from __future__ import annotations

import sys

import pytest

from llmflow.model_files import default_model_path
from tests.bench.servers import free_port, server_process
from tests.extras import need


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory):
    """llama-cpp-python's own OpenAI server on the embedded model: a streaming server that
    sends no usage, so output tokens are counted with the tokenizer."""
    need("starlette_context", "compare")
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(default_model_path()),
        "--host", "127.0.0.1", "--port", str(port),
        "--n_threads", "1", "--n_ctx", "2048",
        "--interrupt_requests", "False",  # else a new request cuts the running stream
        "--verbose", "False",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llama-cpp-server") / "server.log"
    with server_process(command, port, log) as url:
        yield url


@pytest.fixture(scope="session")
def llmflow_server(tmp_path_factory):
    """`llmflow serve` on the embedded model: streams with usage when asked."""
    port = free_port()
    command = [
        sys.executable, "-m", "llmflow", "serve",
        "--host", "127.0.0.1", "--port", str(port),
        "--engine-option", "n_threads=1",  # on a busy 2-core machine more threads wait on each other
        "--log-level", "warning",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llmflow-server") / "server.log"
    with server_process(command, port, log) as url:
        yield url
