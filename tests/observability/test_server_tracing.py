"""Traces and timings of a real server on 127.0.0.1: one complete trace per generation, however it
ends (finished, client gone, engine failure); the `timings` a client asks for are the numbers the
server's /metrics records."""

from __future__ import annotations

import json

import httpx
import pytest
from openai import OpenAI

from llmflow import LLM
from llmflow.server import ServedModel
from tests.observability.conftest import all_trace_count, only_span
from tests.observability.engines import FailingEngine
from tests.server.conftest import TIMEOUT_S, metric, running, sse_events, wait_until_idle

MESSAGES = [{"role": "user", "content": "Tell me a long story about a castle."}]


@pytest.fixture(scope="module")
def served(default_served) -> ServedModel:
    """The engine `llmflow serve` uses by default."""
    return default_served


@pytest.fixture
def traced_server(served, experiment):
    with running(served, tracing=True) as server:
        yield server


def _client(server) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def test_a_streamed_chat_is_one_trace_with_the_timings_of_the_metrics(traced_server, served, experiment):
    with httpx.Client(base_url=traced_server.url, timeout=TIMEOUT_S) as http:
        stream = _client(traced_server).chat.completions.create(
            model=served.name,
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"timings": True},
        )
        chunks = list(stream)
        metrics = wait_until_idle(http)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1].model_dump()
    timings, usage = last["timings"], last["usage"]
    assert "timings" not in chunks[-2].model_dump()  # only the last chunk carries them
    assert timings["completion_tokens"] == usage["completion_tokens"]
    ttft_s = metric(metrics, "llmflow_time_to_first_token_seconds_sum")
    assert ttft_s * 1000 == pytest.approx(timings["ttft_ms"], abs=0.01)
    e2e_s = metric(metrics, "llmflow_e2e_request_latency_seconds_sum")
    assert e2e_s * 1000 == pytest.approx(timings["e2e_ms"], abs=0.01)

    (trace,) = experiment.traces(1)
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.name == "llmflow.chat_completions"
    assert span.inputs["messages"] == MESSAGES
    assert span.outputs["content"] == text
    assert span.outputs["finish_reason"] == "length"
    assert span.outputs["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert span.attributes["llmflow.ttft_ms"] == timings["ttft_ms"]
    assert span.attributes["llmflow.queue_ms"] == timings["queue_ms"]
    assert trace.info.token_usage["output_tokens"] == usage["completion_tokens"]


def test_a_client_disconnect_leaves_one_cancelled_trace(traced_server, served, experiment):
    body = {"model": served.name, "messages": MESSAGES, "max_tokens": 200, "stream": True}
    with httpx.Client(base_url=traced_server.url, timeout=TIMEOUT_S) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()
            received = [line for line, _ in zip(lines, range(6), strict=False)]
        assert any(line.startswith("data: ") for line in received)
        wait_until_idle(http)

    (trace,) = experiment.traces(1)
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.outputs["finish_reason"] == "cancelled"
    assert 1 <= span.outputs["usage"]["completion_tokens"] < 200
    assert span.attributes["llmflow.finish_reason"] == "cancelled"


def test_a_completion_answer_has_timings_when_asked(traced_server, served, experiment):
    answer = _client(traced_server).completions.create(
        model=served.name, prompt="Once upon a time", max_tokens=8, extra_body={"timings": True}
    )
    timings = answer.model_dump()["timings"]
    assert timings["completion_tokens"] == answer.usage.completion_tokens
    assert timings["e2e_ms"] >= timings["ttft_ms"] >= timings["queue_ms"] >= 0
    (trace,) = experiment.traces(1)
    assert only_span(trace).name == "llmflow.completions"


def test_an_invocations_stream_of_an_llmflow_model_is_one_span(traced_server, experiment):
    """The stream joins the server's own pipeline: one span per request, not the model's nested
    in the server's."""
    body = {"prompt": "Hi", "max_tokens": 6, "stream": True, "timings": True}
    with httpx.Client(base_url=traced_server.url, timeout=TIMEOUT_S) as http:
        events = sse_events(http.post("/invocations", json=body).text)
        wait_until_idle(http)
    final = json.loads(events[-2])
    assert events[-1] == "[DONE]"
    assert final["timings"]["queue_ms"] is not None  # the server's numbers

    (trace,) = experiment.traces(1)
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.name == "llmflow.invocations"
    assert span.outputs["content"] == "".join(json.loads(e)["content"] for e in events[:-2])
    assert span.outputs["usage"] == final["usage"]
    assert span.outputs["finish_reason"] == final["finish_reason"]


def test_an_invocations_predict_of_an_llmflow_model_is_one_span(traced_server, experiment):
    """Its rows are one generation of the server's pipeline: one span, the answers its outputs."""
    rows = {"dataframe_split": {"columns": ["prompt"], "data": [["Hi"], ["Yo"]]}}
    with httpx.Client(base_url=traced_server.url, timeout=TIMEOUT_S) as http:
        answers = http.post("/invocations", json={**rows, "params": {"max_tokens": 3}}).json()["predictions"]
        wait_until_idle(http)

    (trace,) = experiment.traces(1)
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.name == "llmflow.invocations"
    assert span.outputs == answers and len(answers) == 2


def test_an_invocations_disconnect_ends_its_span(traced_server, experiment):
    body = {"prompt": "Tell me a long story.", "max_tokens": 200, "stream": True}
    with httpx.Client(base_url=traced_server.url, timeout=TIMEOUT_S) as http:
        with http.stream("POST", "/invocations", json=body) as response:
            received = [line for line, _ in zip(response.iter_lines(), range(4), strict=False)]
        assert any(line.startswith("data: ") for line in received)
        wait_until_idle(http)

    (trace,) = experiment.traces(1)
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.name == "llmflow.invocations"
    assert span.outputs["finish_reason"] == "cancelled"
    assert 1 <= span.outputs["usage"]["completion_tokens"] < 200


def test_an_engine_failure_mid_stream_leaves_one_error_trace(experiment):
    with running(ServedModel.from_llm(LLM(FailingEngine())), tracing=True) as server:
        body = {"model": "scripted", "messages": MESSAGES, "stream": True, "temperature": 0}
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            events = sse_events(http.post("/v1/chat/completions", json=body).text)
            wait_until_idle(http)
    assert "error" in json.loads(events[-2])

    (trace,) = experiment.traces(1)
    assert trace.info.state == "ERROR"
    span = only_span(trace)
    assert span.outputs["content"]  # what was streamed before the failure
    assert any(event.name == "exception" for event in span.events)


def test_a_server_with_tracing_off_records_nothing(served, experiment):
    before = all_trace_count()
    with running(served, tracing=False) as server:
        answer = _client(server).chat.completions.create(model=served.name, messages=MESSAGES, max_tokens=4)
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            wait_until_idle(http)
    assert answer.choices[0].message.content
    assert all_trace_count() == before


def test_a_streamed_response_is_one_trace_with_usage(traced_server, served, experiment):
    with _client(traced_server).responses.stream(
        model=served.name, input="Tell me a story.", max_output_tokens=6, temperature=0
    ) as stream:
        events = list(stream)
    final = events[-1].response
    (trace,) = experiment.traces(1)
    span = only_span(trace)
    assert span.name == "llmflow.responses" and span.inputs["input"] == "Tell me a story."
    assert span.outputs["content"] == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )
    assert trace.info.token_usage["output_tokens"] == final.usage.output_tokens


def test_a_speculative_answer_names_its_draft_tokens_in_its_trace(experiment):
    llm = LLM.load(engine_options={"n_ctx": 1024, "speculative": True})
    prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"
    try:
        with running(ServedModel.from_llm(llm), tracing=True) as server:
            client = _client(server)
            model = client.models.list().data[0].id
            answer = client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
            (trace,) = experiment.traces(1)
    finally:
        llm.close()
    attributes = only_span(trace).attributes
    assert answer.usage.completion_tokens == 24
    assert attributes["llmflow.draft_tokens"] >= attributes["llmflow.accepted_draft_tokens"] > 0
