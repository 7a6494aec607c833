"""Real servers on 127.0.0.1 (free ports, stopped after use) around the embedded model, and a
third-party MLflow pyfunc model saved and loaded the ordinary way."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from openai import OpenAI

from llmflow.server import ServedModel, ServerSettings, create_app
from llmflow.server.uvicorn_server import BackgroundServer

#: generous: a loaded 2-core machine can be slow, and a hang should still fail rather than stall
TIMEOUT_S = 300


@contextmanager
def running(served: Any, **settings: Any) -> Iterator[BackgroundServer]:
    """A server for `served` with `settings`, stopped on exit."""
    with BackgroundServer(create_app(served, ServerSettings(**settings))) as server:
        yield server


@pytest.fixture(scope="session", params=["llama_cpp_batched", "llama_cpp"])
def served_llm(request, embedded_llm) -> ServedModel:
    """Each server test runs on the engine `llmflow serve` uses by default and on the one-at-a-time
    engine: their admission and streaming paths differ."""
    if request.param == "llama_cpp":
        return ServedModel.from_llm(embedded_llm)
    return request.getfixturevalue("default_served")


@pytest.fixture(scope="session")
def server(served_llm) -> Iterator[BackgroundServer]:
    """One server with default settings for the whole session."""
    with running(served_llm) as background:
        yield background


@pytest.fixture(scope="session")
def model_name(served_llm) -> str:
    return served_llm.name


@pytest.fixture
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture
def client(server) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


@pytest.fixture
def start_server(served_llm) -> Callable[..., Any]:
    """`with start_server(**settings) as server:` a server on the embedded model with other settings."""
    return lambda **settings: running(served_llm, **settings)


# -- reading what a server says --------------------------------------------------------------------
def sse_events(raw: str) -> list[str]:
    """The `data:` payloads of an SSE body, checking the framing on the way."""
    assert raw.endswith("\n\n"), raw[-100:]
    events = []
    for block in raw.split("\n\n")[:-1]:
        lines = [line for line in block.split("\n") if not line.startswith(":")]  # ":" = ping comments
        if not lines:
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), block
        events.append(lines[0].removeprefix("data: "))
    return events


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` in Prometheus text whose labels include `labels` (0 when
    none): series split by a label not named (`model`) add up, as Prometheus' `sum` would."""
    total = 0.0
    for line in text.splitlines():
        found = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if not found or found.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
        if all(have.get(key) == value for key, value in labels.items()):
            total += float(found.group(3))
    return total


def wait_until_idle(http: httpx.Client, timeout_s: float = TIMEOUT_S) -> str:
    """Poll /metrics until no generation runs or waits; return the metrics text."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = http.get("/metrics").text
        running = metric(text, "llmflow_num_requests_running")
        waiting = metric(text, "llmflow_num_requests_waiting")
        if running == 0 and waiting == 0:
            return text
        assert time.monotonic() < deadline, f"still {running} running and {waiting} waiting"
        time.sleep(0.02)


def wait_for_metric(http: httpx.Client, name: str, value: float, timeout_s: float = TIMEOUT_S) -> None:
    """Poll /metrics until the sample `name` reads `value`."""
    deadline = time.monotonic() + timeout_s
    while metric(http.get("/metrics").text, name) != value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        time.sleep(0.01)


class QueuedRequest:
    """A short completion sent from another thread, returned once the server has queued it."""

    def __init__(self, url: str, body: dict[str, Any]):
        self._result: dict[str, httpx.Response] = {}

        def send() -> None:
            with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
                self._result["response"] = client.post("/v1/completions", json=body)

        self._thread = threading.Thread(target=send)
        self._thread.start()
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as http:
            wait_for_metric(http, "llmflow_num_requests_waiting", 1)

    def response(self) -> httpx.Response:
        self._thread.join(TIMEOUT_S)
        return self._result["response"]


def wait_healthy(process: Any, url: str, timeout_s: float = TIMEOUT_S) -> None:
    """Wait until a server started as `process` answers `url`/health; fail with its output if it dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.2)
