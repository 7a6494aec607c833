"""Admission over HTTP: a client that leaves cancels its generation and frees its place; a full
queue answers 429 with Retry-After, then the server recovers; /metrics counts what was served."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx

from tests.server.conftest import TIMEOUT_S, QueuedRequest, metric, wait_until_idle

COUNTING = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0}


class OpenStream:
    """A long streaming completion, read up to its third text chunk and left open."""

    def __init__(self, client: httpx.Client, model_name: str, max_tokens: int = 400):
        body = {"model": model_name, **COUNTING, "max_tokens": max_tokens, "stream": True}
        self.response = client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
        assert self.response.status_code == 200
        self._lines = self.response.iter_lines()  # kept: dropping it mid-way would close the connection
        self.read = 0
        for line in self._lines:
            if line.startswith("data: {"):
                self.read += 1
                if self.read == 3:
                    break

    def close(self) -> None:
        """The client goes away: the connection closes mid-stream."""
        self.response.close()


def test_a_client_that_disconnects_cancels_its_generation(http, model_name):
    before = wait_until_idle(http)
    with httpx.Client(base_url=str(http.base_url), timeout=TIMEOUT_S) as client:
        stream = OpenStream(client, model_name)
        stream.close()
        read = stream.read

    after = wait_until_idle(http)  # the place is free again
    cancelled = metric(after, "llmflow_requests_finished_total", outcome="cancelled")
    assert cancelled == metric(before, "llmflow_requests_finished_total", outcome="cancelled") + 1
    generated = metric(after, "llmflow_generation_tokens_total") - metric(
        before, "llmflow_generation_tokens_total"
    )
    assert read <= generated < read + 20, (read, generated)  # stopped right away, far from 400 tokens

    answer = http.post("/v1/completions", json={"model": model_name, **COUNTING, "max_tokens": 2})
    assert answer.status_code == 200  # and the server goes on serving


def test_a_non_streaming_client_that_disconnects_cancels_too(http, model_name):
    before = wait_until_idle(http)
    body = {"model": model_name, **COUNTING, "max_tokens": 400}
    # the client gives up after half a second and closes its connection
    with (
        httpx.Client(base_url=str(http.base_url), timeout=0.5) as impatient,
        contextlib.suppress(httpx.TimeoutException),
    ):
        impatient.post("/v1/completions", json=body)
    after = wait_until_idle(http)
    generated = metric(after, "llmflow_generation_tokens_total") - metric(
        before, "llmflow_generation_tokens_total"
    )
    assert metric(after, "llmflow_requests_finished_total", outcome="cancelled") == (
        metric(before, "llmflow_requests_finished_total", outcome="cancelled") + 1
    )
    assert generated < 400


def test_full_queue_is_429_with_retry_after_then_the_server_recovers(start_server, model_name):
    with (
        start_server(max_running=1, max_queue=1) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        running = OpenStream(http, model_name)  # takes the only place
        waiting = QueuedRequest(server.url, {"model": model_name, **COUNTING, "max_tokens": 2})
        refused = http.post("/v1/completions", json={"model": model_name, **COUNTING, "max_tokens": 2})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "queue_full"
        refused_stream = http.post(
            "/v1/chat/completions",
            json={"model": model_name, "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
        assert refused_stream.status_code == 429  # refused before any SSE byte

        running.close()  # the running client leaves: the waiting one gets the place
        assert waiting.response().status_code == 200
        wait_until_idle(http)
        recovered = http.post("/v1/completions", json={"model": model_name, **COUNTING, "max_tokens": 2})
        assert recovered.status_code == 200
        text = http.get("/metrics").text
        assert metric(text, "llmflow_requests_total", endpoint="/v1/completions", status="429") == 1
        assert metric(text, "llmflow_requests_total", endpoint="/v1/chat/completions", status="429") == 1


def test_metrics_count_what_was_served(start_server, model_name):
    with start_server() as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        usage = [0, 0]
        for stream in (False, True):
            body = {
                "model": model_name,
                **COUNTING,
                "max_tokens": 5,
                "stream": stream,
                **({"stream_options": {"include_usage": True}} if stream else {}),
            }
            response = http.post("/v1/completions", json=body)
            if stream:
                answer = json.loads(response.text.split("data: ")[-2])["usage"]
            else:
                answer = response.json()["usage"]
            usage[0] += answer["prompt_tokens"]
            usage[1] += answer["completion_tokens"]
        http.post("/v1/completions", json={"model": "other", "prompt": "x"})
        text = wait_until_idle(http)

    assert metric(text, "llmflow_requests_total", endpoint="/v1/completions", status="200") == 2
    assert metric(text, "llmflow_requests_total", endpoint="/v1/completions", status="404") == 1
    assert metric(text, "llmflow_prompt_tokens_total") == usage[0]
    assert metric(text, "llmflow_generation_tokens_total") == usage[1]
    for histogram in ("time_to_first_token", "request_queue_time", "e2e_request_latency"):
        assert metric(text, f"llmflow_{histogram}_seconds_count") == 2
    assert metric(text, "llmflow_inter_token_latency_seconds_count") >= 2 * 3  # chunks after the first
    assert metric(text, "llmflow_requests_finished_total", outcome="length") == 2
    assert metric(text, "llmflow_num_requests_running") == 0


def test_a_client_that_leaves_the_queue_gets_nothing_generated(start_server, model_name):
    with (
        start_server(max_running=1, max_queue=2) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        running = OpenStream(http, model_name)  # takes the only place
        before = http.get("/metrics").text

        def impatient() -> None:  # waits in the queue, gives up after half a second
            body = {"model": model_name, **COUNTING, "max_tokens": 50, "stream": True}
            with (
                httpx.Client(base_url=server.url, timeout=0.5) as client,
                contextlib.suppress(httpx.TimeoutException),
            ):
                client.post("/v1/completions", json=body)

        leaver = threading.Thread(target=impatient)
        leaver.start()
        leaver.join()
        deadline = time.monotonic() + TIMEOUT_S
        while metric(text := http.get("/metrics").text, "llmflow_num_requests_waiting") != 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert metric(text, "llmflow_num_requests_running") == 1  # the first stream still runs
        running.close()
        after = wait_until_idle(http)

    finished = "llmflow_requests_finished_total"
    assert sum(metric(after, finished, outcome=o) for o in ("stop", "length", "cancelled", "error")) == (
        sum(metric(before, finished, outcome=o) for o in ("stop", "length", "cancelled", "error")) + 1
    )  # only the first stream ever ran
    # both clients left before their answers were complete: the impatient one and the first stream
    assert metric(after, "llmflow_requests_total", endpoint="/v1/completions", status="499") == 2
