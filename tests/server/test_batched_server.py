"""A server on the batching engine (what `llmflow serve` uses for a GGUF model): concurrent streams
over HTTP decode together, each with its own params and stops; beyond `parallel` running and
`max_queue` waiting, requests get 429; a client that leaves frees its sequence."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from llmflow.server import load_served
from tests.server.conftest import TIMEOUT_S, QueuedRequest, running, wait_for_metric, wait_until_idle
from tests.server.test_concurrency import COUNTING, OpenStream

PARALLEL = 4


@pytest.fixture(scope="module")
def batched():
    served = load_served(None, engine_options={"n_ctx": 512, "n_threads": 1}, parallel=PARALLEL)
    assert served.engine_name == "llama_cpp_batched"
    yield served
    served.llm.close()


@pytest.fixture(scope="module")
def server(batched) -> Iterator:
    with running(batched, max_queue=1) as background:
        yield background


def test_concurrent_streams_each_keep_their_params_and_stops(server, batched):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    requests = [
        {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 12, "temperature": 0},
        {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 30, "temperature": 0, "stop": [" 9"]},
        {"prompt": "The capital of France is", "max_tokens": 5, "temperature": 0},
        {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0.9, "seed": 7},
    ]
    alone = [batched.llm.generate(r["prompt"], _params(r), raw=True) for r in requests]
    results: list = [None] * len(requests)

    def stream(i: int) -> None:
        chunks = client.completions.create(model=batched.name, stream=True, **requests[i])
        parts, finish = [], []
        for chunk in chunks:
            parts.append(chunk.choices[0].text)
            if chunk.choices[0].finish_reason:
                finish.append(chunk.choices[0].finish_reason)
        results[i] = ("".join(parts), finish)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    for (text, finish), expected in zip(results, alone, strict=True):
        assert text == expected.text  # the same answer as alone, greedy or seeded
        assert finish == [expected.finish_reason.value]
    assert results[1][1] == ["stop"] and " 9" not in results[1][0]


def _params(request: dict) -> dict:
    return {k: v for k, v in request.items() if k != "prompt"}


def test_beyond_parallel_and_queue_is_429_and_a_leaving_client_frees_its_sequence(server, batched):
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        wait_until_idle(http)
        streams = [OpenStream(http, batched.name) for _ in range(PARALLEL)]  # every sequence busy
        assert batched.llm.engine.stats().free_sequences == 0
        waiting = QueuedRequest(server.url, {"model": batched.name, **COUNTING, "max_tokens": 2})
        refused = http.post("/v1/completions", json={"model": batched.name, **COUNTING, "max_tokens": 2})
        assert refused.status_code == 429 and "retry-after" in refused.headers

        streams[0].close()  # one client leaves: the waiting request takes its sequence
        assert waiting.response().status_code == 200
        for stream in streams[1:]:
            stream.close()
        wait_until_idle(http)
        wait_for_metric(http, "llmflow_engine_free_sequences", PARALLEL)  # freed at the next step
        assert batched.llm.engine.stats().free_sequences == PARALLEL
