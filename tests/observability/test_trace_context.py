"""A caller's `traceparent` continues its trace: a client span in another process and the server's
span of the request it sent land in one trace of a real tracking store, the server's span a child of
the client's. A malformed header starts a new trace; a server with tracing off records nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import httpx
import mlflow
import pytest

from llmflow.observability.propagation import CallerTrace
from tests.observability.conftest import TRACE_WAIT_S, all_trace_count, only_span
from tests.server.conftest import TIMEOUT_S, running, wait_until_idle

BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}

#: a client process: one span, inside it a chat request carrying the span's context; the span ends
#: once the server's span is in the store, so that the two processes write the trace one after the
#: other, in one order on every machine (a failure says which side's span is missing); prints the
#: trace id and the span id
CLIENT = textwrap.dedent(
    """
    import os, sys, json, time, httpx, mlflow
    from mlflow.tracing import get_tracing_context_headers_for_http_request

    url, body, wait_s = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    with mlflow.start_span("client.call") as span:
        headers = get_tracing_context_headers_for_http_request()
        answer = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=300)
        answer.raise_for_status()
        deadline = time.monotonic() + wait_s
        client, experiment = mlflow.MlflowClient(), os.environ["MLFLOW_EXPERIMENT_ID"]
        while span.trace_id not in {
            t.info.trace_id for t in client.search_traces(locations=[experiment], include_spans=False)
        }:
            assert time.monotonic() < deadline, "the server's span never reached the store"
            time.sleep(0.1)
    mlflow.flush_trace_async_logging()
    print(span.trace_id, span.span_id)
    """
)


@pytest.fixture(scope="module")
def served(default_served):
    return default_served


def _http(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=TIMEOUT_S)


def _client_process(url: str, body: dict) -> tuple[str, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow.get_tracking_uri()}

    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, json.dumps(body), str(TRACE_WAIT_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trace_id, span_id = done.stdout.split()[-2:]
    return trace_id, span_id


def _trace(trace_id: str, spans: int) -> mlflow.entities.Trace:
    """The trace once it holds `spans` spans (the server's are logged as they end)."""

    deadline = time.monotonic() + TRACE_WAIT_S
    while True:
        mlflow.flush_trace_async_logging()
        trace = mlflow.get_trace(trace_id, silent=True)
        if trace is not None and len(trace.data.spans) >= spans:
            return trace
        assert time.monotonic() < deadline, trace and [span.name for span in trace.data.spans]
        time.sleep(0.1)


def test_a_client_span_in_another_process_and_the_servers_span_are_one_trace(served, experiment):
    with running(served) as server:  # tracing's auto rule: the sampled traceparent turns it on
        trace_id, client_span_id = _client_process(server.url, {"model": served.name, **BODY})
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            wait_until_idle(http)
    trace = _trace(trace_id, 2)
    spans = {span.name: span for span in trace.data.spans}
    assert set(spans) == {"client.call", "llmflow.chat_completions"}
    server_span = spans["llmflow.chat_completions"]
    assert server_span.parent_id == client_span_id
    assert server_span.trace_id == trace_id
    assert server_span.outputs["usage"]["completion_tokens"] >= 1
    assert [t.info.trace_id for t in experiment.traces(1)] == [trace_id]  # no second trace


def test_a_span_of_this_process_is_continued_too(served, experiment):
    """The caller and the server in one process: the server's span joins the caller's live trace."""
    with running(served, tracing=True) as server, _http(server) as http, mlflow.start_span("client") as span:
        headers = mlflow.tracing.get_tracing_context_headers_for_http_request()
        answer = http.post("/v1/chat/completions", json={"model": served.name, **BODY}, headers=headers)
        assert answer.status_code == 200, answer.text
        wait_until_idle(http)
    trace = _trace(span.trace_id, 2)
    server_span = next(s for s in trace.data.spans if s.name == "llmflow.chat_completions")
    assert server_span.parent_id == span.span_id


def test_a_malformed_traceparent_starts_a_new_trace(served, experiment):
    headers = {"traceparent": "00-not-a-trace-01"}
    with running(served, tracing=True) as server, _http(server) as http:
        answer = http.post("/v1/chat/completions", json={"model": served.name, **BODY}, headers=headers)
        wait_until_idle(http)
    assert answer.status_code == 200, answer.text
    (trace,) = experiment.traces(1)
    assert only_span(trace).parent_id is None


def test_a_server_with_tracing_off_ignores_a_traceparent(served, experiment):
    before = all_trace_count()
    headers = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    with running(served, tracing=False) as server, _http(server) as http:
        answer = http.post("/v1/chat/completions", json={"model": served.name, **BODY}, headers=headers)
        wait_until_idle(http)
    assert answer.status_code == 200, answer.text
    assert all_trace_count() == before


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("00-" + "a" * 32 + "-" + "b" * 16 + "-01", True),
        ("00-" + "A" * 32 + "-" + "B" * 16 + "-00", False),  # upper case is read as lower case
        ("00-" + "0" * 32 + "-" + "b" * 16 + "-01", None),  # all-zero trace id
        ("00-" + "a" * 32 + "-" + "0" * 16 + "-01", None),  # all-zero parent id
        ("01-" + "a" * 32 + "-" + "b" * 16 + "-01", None),  # unknown version
        ("00-" + "a" * 31 + "-" + "b" * 16 + "-01", None),
        ("garbage", None),
    ],
)
def test_traceparent_headers_are_read_as_the_w3c_format_says(value: str, expected: bool | None):
    caller = CallerTrace.from_headers([(b"traceparent", value.encode()), (b"tracestate", b"k=v")])
    assert (None if caller is None else caller.sampled) == expected
    if caller is not None:
        assert caller.headers() == {"traceparent": value.lower(), "tracestate": "k=v"}
