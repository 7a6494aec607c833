"""llmflow on a real Ray Serve (local cluster, embedded model, one thread per replica): load is
spread over the replicas, streams stay streams through Ray's proxy, a client that leaves frees
its sequence, a replica that dies ends its streams with an error event and comes back, and the
deployment scales up under load and down when idle."""

from __future__ import annotations

import collections
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import OpenAI

from llmflow.ray.app import MODEL_NAME
from llmflow.ray.launch import APP_NAME
from llmflow.ray.replica import REPLICA_HEADER
from llmflow.server.model_config import ModelConfig
from tests.ray.conftest import (
    THREADS,
    free_port_pair,
    metrics_by_replica,
    replica_count,
    served_requests,
    wait_for,
)
from tests.server.conftest import TIMEOUT_S, metric, running, sse_events

MODEL = ModelConfig().expected_name()
QUESTION = [{"role": "user", "content": "Name three colors."}]
COUNTING = {"model": MODEL, "prompt": "1, 2, 3, 4, 5,", "temperature": 0}


METRICS_PORT = free_port_pair()


@pytest.fixture(scope="module")
def two_replicas(deploy) -> str:
    return deploy(replicas=2, metrics_port=METRICS_PORT)


@pytest.fixture
def http(two_replicas):
    with httpx.Client(base_url=two_replicas, timeout=TIMEOUT_S) as client:
        yield client


def stream_chat(url: str, max_tokens: int = 12) -> tuple[str, list[str]]:
    """One streamed chat completion: the replica that answered and the SSE payloads."""
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": max_tokens, "stream": True}
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return response.headers[REPLICA_HEADER], sse_events(response.text)


def test_concurrent_streams_are_spread_over_both_replicas(two_replicas, http):
    before = metrics_by_replica(http, 2)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: stream_chat(two_replicas), range(8)))
    for _, events in answers:
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("stop", "length")
    served_by = collections.Counter(replica for replica, _ in answers)
    assert set(served_by) == set(before), served_by  # both replicas took a share
    after = metrics_by_replica(http, 2)
    path = "/v1/chat/completions"
    for replica, count in served_by.items():  # and each counts exactly its own
        assert served_requests(after[replica], path) - served_requests(before[replica], path) == count
    # the same counts on each replica's own metrics port, as Prometheus would scrape them
    scraped = [httpx.get(f"http://127.0.0.1:{METRICS_PORT + rank}/metrics").text for rank in (0, 1)]
    assert sorted(served_requests(text, path) for text in scraped) == sorted(
        served_requests(text, path) for text in after.values()
    )


def test_openai_client_streams_through_rays_proxy_with_usage_as_llmflow_serve_answers(two_replicas):
    def ask(base_url: str) -> tuple[str, object]:
        client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
        stream = client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            temperature=0,
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        assert len([chunk for chunk in chunks if chunk.choices]) > 2  # token by token, not one block
        return text, chunks[-1].usage

    served = ModelConfig(threads=THREADS).load()
    try:
        with running(served) as local:
            local_text, local_usage = ask(local.url)
    finally:
        served.llm.close()
    ray_text, ray_usage = ask(two_replicas)
    assert ray_text == local_text  # same weights, engine and threads: the same greedy answer
    assert ray_usage is not None and ray_usage.completion_tokens == local_usage.completion_tokens
    assert ray_usage.prompt_tokens == local_usage.prompt_tokens


def test_invocations_structured_output_and_errors_behave_as_llmflow_serves(two_replicas, http):
    streamed = http.post("/invocations", json={"prompt": "Hi", "max_tokens": 6, "stream": True})
    assert streamed.status_code == 200
    events = sse_events(streamed.text)
    assert events[-1] == "[DONE]" and "content" in json.loads(events[0])

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Give a number as JSON."}],
        "max_tokens": 40,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"])["n"], int)

    bad = http.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, "temperature": -1})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "temperature"
    assert http.post("/v1/chat/completions", json={"model": "nope", "messages": QUESTION}).status_code == 404


def test_a_client_that_disconnects_frees_its_sequence_on_the_replica_that_served_it(two_replicas, http):
    before = metrics_by_replica(http, 2)
    with httpx.Client(base_url=two_replicas, timeout=TIMEOUT_S) as client:
        body = {**COUNTING, "max_tokens": 400, "stream": True}
        response = client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
        replica = response.headers[REPLICA_HEADER]
        read = 0
        for line in response.iter_lines():
            read += line.startswith("data: {")
            if read == 3:
                break
        response.close()

    def cancelled_and_idle() -> bool:
        text = metrics_by_replica(http, 2)[replica]
        finished = metric(text, "llmflow_requests_finished_total", outcome="cancelled")
        idle = metric(text, "llmflow_num_requests_running") == 0
        return (
            idle
            and finished
            == metric(before[replica], "llmflow_requests_finished_total", outcome="cancelled") + 1
        )

    wait_for(cancelled_and_idle, "the replica to cancel the generation")
    text = metrics_by_replica(http, 2)[replica]
    generated = metric(text, "llmflow_generation_tokens_total") - metric(
        before[replica], "llmflow_generation_tokens_total"
    )
    assert read <= generated < 200, generated  # stopped soon after the client left, far from 400


def test_a_full_queue_is_answered_429_and_a_large_body_413(deploy):
    url = deploy(replicas=1, server={"max_running": 1, "max_queue": 0, "max_body_bytes": 4096})
    try:
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
            body = {**COUNTING, "max_tokens": 300, "stream": True}
            holder = client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
            lines = holder.iter_lines()  # kept: dropping it would close the connection
            next(line for line in lines if line.startswith("data: {"))
            refused = client.post("/v1/completions", json={**COUNTING, "max_tokens": 2})
            holder.close()
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert "retry-after" in refused.headers
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:  # and a body over the limit
            too_large = client.post("/v1/completions", content=b"x" * 5000)
        assert too_large.status_code == 413
        assert too_large.json()["error"]["type"] == "invalid_request_error"
    finally:
        deploy(replicas=2)


def test_a_replica_killed_mid_stream_ends_its_stream_with_an_error_and_comes_back(two_replicas, http):
    import ray

    metrics_by_replica(http, 2)
    with httpx.Client(base_url=two_replicas, timeout=TIMEOUT_S) as client:
        body = {"model": MODEL, "messages": QUESTION, "max_tokens": 500, "stream": True, "temperature": 0}
        body["messages"] = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
        response = client.send(client.build_request("POST", "/v1/chat/completions", json=body), stream=True)
        victim = response.headers[REPLICA_HEADER]
        events = []
        for line in response.iter_lines():  # read to the end: no hang, whatever happens
            if not line.startswith("data: "):
                continue
            events.append(line.removeprefix("data: "))
            if len(events) == 3:
                ray.kill(_replica_actor(victim), no_restart=True)
        response.close()

    error = json.loads(events[-1])["error"]
    assert error["code"] == "replica_lost" and "stopped" in error["message"], events[-3:]

    answers = [stream_chat(two_replicas, max_tokens=4) for _ in range(4)]  # the other replica serves
    assert all(events[-1] == "[DONE]" for _, events in answers)
    wait_for(lambda: replica_count() == 2, "Ray Serve to replace the replica")
    assert victim not in metrics_by_replica(http, 2)


def test_autoscaling_adds_a_replica_under_load_and_removes_it_when_idle(deploy):
    scaling = {
        "min_replicas": 1,
        "max_replicas": 2,
        "target_ongoing_requests": 1,
        "look_back_period_s": 1,
        "upscale_delay_s": 0,
        "downscale_delay_s": 3,
    }
    url = deploy(scaling=scaling)
    try:
        wait_for(lambda: replica_count() == 1, "one replica at rest")
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                stream_chat(url, max_tokens=48)

        with ThreadPoolExecutor(3) as pool:
            for _ in range(3):
                pool.submit(load)
            try:
                wait_for(lambda: replica_count() == 2, "a second replica under load")
            finally:
                stop.set()
        wait_for(lambda: replica_count() == 1, "back to one replica when idle")
    finally:
        deploy(replicas=2)


def _replica_actor(replica_id: str):
    """The Ray actor of the model replica `replica_id` (the id its answers carry), by the name
    Ray Serve gives replica actors."""
    import ray

    return ray.get_actor(f"SERVE_REPLICA::{APP_NAME}#{MODEL_NAME}#{replica_id}", namespace="serve")
