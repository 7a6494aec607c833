"""Traces of the pyfunc model's calls in a real sqlite tracking store: each call leaves exactly one
complete trace, however its stream ends; with tracing off, none."""

from __future__ import annotations

import gc

import mlflow
import pytest

import llmflow.mlflow
from llmflow import LLM
from llmflow.mlflow import LlmflowPyfuncModel
from tests.fakes.scripted_engine import ScriptedEngine
from tests.observability.conftest import all_trace_count, only_span, traces_in
from tests.observability.engines import FAIL_AFTER, EngineFailure, FailingEngine

PROMPT = {"prompt": "Tell me a story about a castle."}
GREEDY = {"max_tokens": 12, "temperature": 0.0}


@pytest.fixture(scope="module")
def model(embedded_llm) -> LlmflowPyfuncModel:
    return LlmflowPyfuncModel.from_llm(embedded_llm)


def _text(chunks: list[dict]) -> str:
    return "".join(c["content"] for c in chunks)


def test_a_finished_stream_leaves_one_complete_trace(model, experiment):
    chunks = list(model.predict_stream(None, PROMPT, params=GREEDY))
    final = chunks[-1]

    (trace,) = experiment.traces()
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.name == "llmflow.predict_stream"
    assert span.inputs["prompt"] == PROMPT["prompt"]
    assert span.inputs["params"]["max_tokens"] == 12
    assert span.outputs == {
        "content": _text(chunks),
        "finish_reason": final["finish_reason"],
        "usage": final["usage"],
    }
    attributes = span.attributes
    assert attributes["llmflow.engine"] == "llama_cpp"
    assert attributes["llmflow.finish_reason"] == final["finish_reason"]
    assert attributes["llmflow.ttft_ms"] > 0
    assert attributes["llmflow.e2e_ms"] >= attributes["llmflow.ttft_ms"]
    assert attributes["llmflow.decode_tokens_per_s"] > 0
    usage = trace.info.token_usage
    assert usage["input_tokens"] == final["usage"]["prompt_tokens"]
    assert usage["output_tokens"] == final["usage"]["completion_tokens"]


def test_an_early_break_leaves_one_cancelled_trace_with_exact_usage(model, experiment):
    received = []
    for chunk in model.predict_stream(None, PROMPT, params={**GREEDY, "max_tokens": 64}):
        received.append(chunk)
        if len(received) == 3:
            break
    gc.collect()

    (trace,) = experiment.traces()
    assert trace.info.state == "OK"
    span = only_span(trace)
    assert span.outputs["finish_reason"] == "cancelled"
    assert span.outputs["content"] == _text(received)
    usage = span.outputs["usage"]
    assert 3 <= usage["completion_tokens"] < 64  # drained to the final chunk: the real count
    assert trace.info.token_usage["output_tokens"] == usage["completion_tokens"]


def test_an_abandoned_stream_is_traced_when_collected(model, experiment):
    stream = model.predict_stream(None, PROMPT, params=GREEDY)
    next(stream)
    del stream
    gc.collect()

    (trace,) = experiment.traces()
    assert only_span(trace).outputs["finish_reason"] == "cancelled"


def test_a_stream_never_started_is_traced_without_generating(model, experiment):
    stream = model.predict_stream(None, PROMPT, params=GREEDY)
    del stream
    gc.collect()

    (trace,) = experiment.traces()
    span = only_span(trace)
    assert span.outputs["finish_reason"] == "cancelled"
    assert span.outputs["usage"]["completion_tokens"] == 0


def test_an_engine_failure_mid_stream_leaves_one_error_trace(experiment):
    model = LlmflowPyfuncModel.from_llm(LLM(FailingEngine()))
    received = []
    with pytest.raises(EngineFailure):
        for chunk in model.predict_stream(None, {"prompt": "Hi"}, params={"temperature": 0.0}):
            received.append(chunk)

    (trace,) = experiment.traces()
    assert trace.info.state == "ERROR"
    span = only_span(trace)
    assert span.status.status_code == "ERROR"
    assert span.outputs["content"] == _text(received)
    assert 0 < len(span.outputs["content"].encode()) <= FAIL_AFTER
    assert span.outputs["usage"] is None  # the stream never reached its final chunk
    assert any(event.name == "exception" for event in span.events)


def test_predict_is_one_trace_with_a_span_per_row(model, experiment):
    answers = model.predict(None, ["Hi", "Hello"], params={**GREEDY, "max_tokens": 6, "details": True})

    (trace,) = experiment.traces()
    assert trace.info.state == "OK"
    root = next(s for s in trace.data.spans if s.parent_id is None)
    rows = [s for s in trace.data.spans if s.parent_id == root.span_id]
    assert root.name == "llmflow.predict"
    assert root.outputs == [answer["content"] for answer in answers]
    assert sorted(s.outputs["content"] for s in rows) == sorted(a["content"] for a in answers)
    assert trace.info.token_usage["output_tokens"] == sum(a["usage"]["completion_tokens"] for a in answers)


def test_a_span_nests_in_the_callers_trace(model, store):
    experiment_id = mlflow.MlflowClient().create_experiment("nested")
    # the run only says where the trace goes; the active span is what turns tracing on
    with mlflow.start_run(experiment_id=experiment_id), mlflow.start_span("my app"):
        list(model.predict_stream(None, PROMPT, params={**GREEDY, "max_tokens": 4}))

    (trace,) = traces_in(experiment_id)
    names = sorted(s.name for s in trace.data.spans)
    assert names == ["llmflow.predict_stream", "my app"]


def test_tracing_is_off_by_default_and_when_turned_off(model, store, experiment):
    before = all_trace_count()
    list(model.predict_stream(None, PROMPT, params={**GREEDY, "max_tokens": 4, "trace": False}))
    model.predict(None, ["Hi"], params={**GREEDY, "max_tokens": 4, "trace": False})
    off = LlmflowPyfuncModel.from_llm(model.llm, tracing=False)
    list(off.predict_stream(None, PROMPT, params={**GREEDY, "max_tokens": 4}))
    assert all_trace_count() == before


def test_no_experiment_and_no_flag_records_nothing(model, store):
    before = all_trace_count()
    list(model.predict_stream(None, PROMPT, params={**GREEDY, "max_tokens": 4}))
    model.predict(None, ["Hi"], params={**GREEDY, "max_tokens": 4})
    assert all_trace_count() == before


def test_timings_in_the_final_chunk(model, store):
    chunks = list(model.predict_stream(None, PROMPT, params={**GREEDY, "timings": True}))
    final = chunks[-1]
    assert all("timings" not in c for c in chunks[:-1])
    timings = final["timings"]
    assert timings["completion_tokens"] == final["usage"]["completion_tokens"]
    assert timings["prompt_tokens"] == final["usage"]["prompt_tokens"]
    assert 0 <= timings["queue_ms"] <= timings["ttft_ms"] <= timings["e2e_ms"]
    assert timings["decode_tokens_per_s"] > 0


def test_timings_in_predict_need_details(model, store):
    params = {**GREEDY, "max_tokens": 4, "details": True, "timings": True}
    answers = model.predict(None, ["Hi"], params=params)
    assert answers[0]["timings"]["completion_tokens"] == answers[0]["usage"]["completion_tokens"]
    with pytest.raises(llmflow.mlflow.InvalidModelInput, match="timings"):
        model.predict(None, ["Hi"], params={"timings": True})


def test_a_model_logged_with_tracing_traces_through_mlflow(store, tmp_path):
    """The flag travels in the MLmodel's model_config; `trace`/`timings` are in the ParamSchema."""
    path = tmp_path / "model"
    llmflow.mlflow.save_model(path, engine="llama_cpp", by_reference=True, tracing=True)
    loaded = mlflow.pyfunc.load_model(str(path))
    # no experiment chosen here; one chosen by an earlier test in this process may still be
    # MLflow's active one, so count the store's traces, wherever they went
    before = all_trace_count()
    chunks = list(loaded.predict_stream(PROMPT, params={**GREEDY, "max_tokens": 4, "timings": True}))
    assert "timings" in chunks[-1]
    list(loaded.predict_stream(PROMPT, params={**GREEDY, "max_tokens": 4, "trace": False}))
    assert all_trace_count() == before + 1
    llmflow.mlflow.find_llm(loaded).close()


def test_tracing_adds_no_work_per_chunk_beyond_a_list_append(experiment):
    """No span event per chunk: the recorded trace holds one span and no events."""
    model = LlmflowPyfuncModel.from_llm(LLM(ScriptedEngine()))
    list(model.predict_stream(None, {"prompt": "Hi"}, params={"temperature": 0.0}))
    (trace,) = experiment.traces()
    assert only_span(trace).events == []
