"""POST /invocations: answers as `mlflow models serve` does (compared with MLflow's own scoring app),
and streams with `"stream": true`, for a plain third-party pyfunc model and for llmflow models."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx
import pytest
from mlflow.pyfunc import scoring_server
from starlette.testclient import TestClient

import llmflow.mlflow
from llmflow.errors import InvalidParams
from llmflow.model_files import default_model_path
from llmflow.server import ServerSettings, create_app, load_served
from llmflow.server.uvicorn_server import BackgroundServer
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, metric, running, sse_events, wait_until_idle
from tests.server.pyfunc_models import save_and_load


@pytest.fixture(scope="session")
def echo_model(tmp_path_factory):
    return save_and_load(str(tmp_path_factory.mktemp("echo") / "model"))


@pytest.fixture(scope="session")
def echo_server(echo_model) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(echo_model, ServerSettings(model_name="echo"))) as server:
        yield server


@pytest.fixture
def echo(echo_server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=echo_server.url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture
def mlflow_serve(echo_model, monkeypatch) -> Iterator[TestClient]:
    """MLflow's own scoring server (what `mlflow models serve` runs) on the same model."""
    monkeypatch.setenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", "false")  # init() sets it; restored after
    with TestClient(scoring_server.init(echo_model)) as client:
        yield client


def _chunks(response: httpx.Response) -> list:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


PARITY_BODIES = [
    {"dataframe_split": {"columns": ["prompt"], "data": [["a b"], ["c"]]}},
    {"dataframe_records": [{"prompt": "x y"}], "params": {"shout": True}},
    {"inputs": {"prompt": ["in puts"]}},
    {"instances": [{"prompt": "inst"}]},
    {"prompt": "hello there", "shout": True},
    {"bogus": 1},
    {"dataframe_split": {"columns": ["prompt"], "data": [["a"]]}, "params": {"shout": "loud"}},
]


@pytest.mark.parametrize("body", PARITY_BODIES)
def test_answers_like_mlflow_models_serve(echo, mlflow_serve, body):
    ours = echo.post("/invocations", json=body)
    theirs = mlflow_serve.post("/invocations", json=body)

    assert ours.status_code == theirs.status_code
    if theirs.status_code == 200:
        assert ours.json() == theirs.json()
    else:
        assert ours.json()["error_code"] == theirs.json()["error_code"]
        assert "stack_trace" not in ours.json()


def test_csv_and_unsupported_content_types_like_mlflow(echo, mlflow_serve):
    for content_type, body in [("text/csv", "prompt\nfrom csv\n"), ("text/plain", "hi")]:
        ours = echo.post("/invocations", content=body, headers={"content-type": content_type})
        theirs = mlflow_serve.post("/invocations", content=body, headers={"content-type": content_type})
        assert (ours.status_code, ours.text) == (theirs.status_code, theirs.text)


def test_stream_sends_each_chunk_then_done(echo):
    assert _chunks(echo.post("/invocations", json={"prompt": "one two three", "stream": True})) == [
        {"index": 0, "word": "one"},
        {"index": 1, "word": "two"},
        {"index": 2, "word": "three"},
    ]
    body = {"dataframe_records": [{"prompt": "a b"}], "params": {"shout": True}, "stream": True}
    assert _chunks(echo.post("/invocations", json=body)) == [
        {"index": 0, "word": "A"},
        {"index": 1, "word": "B"},
    ]
    assert echo.post("/invocations", json={"prompt": "not streamed", "stream": False}).json() == [
        "not streamed"
    ]


def test_databricks_path_wraps_a_bare_answer_in_predictions(echo):
    path = "/serving-endpoints/echo/invocations"
    assert echo.post(path, json={"prompt": "not streamed"}).json() == {"predictions": ["not streamed"]}
    records = {"dataframe_records": [{"prompt": "x y"}]}  # wrapped already, by MLflow's scoring
    assert echo.post(path, json=records).json() == echo.post("/invocations", json=records).json()


def test_stream_error_before_the_first_chunk_is_a_json_error(echo):
    response = echo.post("/invocations", json={"prompt": "refuse", "stream": True})
    assert response.status_code == 400 and response.headers["content-type"] == "application/json"
    assert response.json()["error_code"] == "BAD_REQUEST"

    two_rows = {"dataframe_split": {"columns": ["prompt"], "data": [["a"], ["b"]]}, "stream": True}
    assert echo.post("/invocations", json=two_rows).status_code == 400  # predict_stream takes one input

    bad_flag = echo.post("/invocations", json={"prompt": "x", "stream": "yes"})
    assert bad_flag.status_code == 400 and bad_flag.json()["error"]["param"] == "stream"


def test_stream_error_after_the_first_chunk_is_an_error_event_then_done(echo):
    chunks = _chunks(echo.post("/invocations", json={"prompt": "one FAIL two", "stream": True}))
    assert chunks[0] == {"index": 0, "word": "one"}
    error = chunks[1]["error"]
    assert error["type"] == "server_error" and "broke mid-stream" in error["message"]
    assert len(chunks) == 2
    assert _chunks(echo.post("/invocations", json={"prompt": "still here", "stream": True}))  # keeps serving


def test_openai_routes_say_clearly_that_a_plain_pyfunc_model_is_not_served_there(echo):
    response = echo.post(
        "/v1/chat/completions", json={"model": "echo", "messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unsupported_endpoint" and "/invocations" in error["message"]
    assert [m["id"] for m in echo.get("/v1/models").json()["data"]] == ["echo"]
    for path, body in [("/v1/responses", {"model": "echo", "input": "x"}), ("/responses", {"input": []})]:
        response = echo.post(path, json=body)
        assert response.status_code == 404 and response.json()["error"]["code"] == "unsupported_endpoint"


# -- llmflow models -------------------------------------------------------------------------------
GREEDY = {"max_tokens": 6, "temperature": 0}


def _llmflow_stream(http: httpx.Client, body: dict) -> tuple[str, dict]:
    chunks = _chunks(http.post("/invocations", json={**body, "stream": True}))
    *texts, final = chunks
    assert all(set(c) == {"content"} and c["content"] for c in texts)
    assert final["content"] == "" and final["finish_reason"] in ("stop", "length")
    return "".join(c["content"] for c in texts), final


def test_llmflow_model_from_a_gguf_file_streams_at_invocations(http):
    body = {"prompt": "Name a colour.", **GREEDY}
    http.post("/invocations", json=body)  # same prompt-cache state for the next two (see test_openai)
    (answer,) = http.post("/invocations", json=body).json()
    text, final = _llmflow_stream(http, body)

    assert text == answer
    assert final["usage"]["completion_tokens"] <= 6 and final["usage"]["prompt_tokens"] > 0

    messages = {"messages": [{"role": "user", "content": "Hi"}], "params": {"max_tokens": 2}}
    assert _llmflow_stream(http, messages)[1]["usage"]["completion_tokens"] <= 2
    split = {"dataframe_split": {"columns": ["prompt"], "data": [["Hi"]]}, "params": {"max_tokens": 2}}
    assert len(http.post("/invocations", json=split).json()["predictions"]) == 1


def test_llmflow_model_bad_input_is_400_before_streaming(http):
    for stream in (False, True):
        response = http.post("/invocations", json={"prompt": "Hi", "max_tokens": -1, "stream": stream})
        assert response.status_code == 400 and response.headers["content-type"] == "application/json"
        assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
        assert "max_tokens" in response.json()["message"]


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Store:
    store = Store.create(tmp_path_factory.mktemp("server-mlflow"))
    with using(store):
        llmflow.mlflow.log_model("model", registered_model_name="chat", by_reference=True)
    return store


def test_serves_a_registered_llmflow_model_on_every_route(registry):
    with using(registry):
        served = load_served("models:/chat/1")
    try:
        assert served.name == "chat" and served.llm is not None and served.pyfunc is not None
        with running(served) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            chat = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
            assert http.post("/v1/chat/completions", json=chat).json()["usage"]["completion_tokens"] <= 2
            assert (
                _llmflow_stream(http, {"prompt": "Hi", "max_tokens": 2})[1]["usage"]["completion_tokens"] <= 2
            )
    finally:
        served.llm.close()


def test_a_logged_llama_cpp_model_is_served_with_the_batching_engine(registry):
    with using(registry):
        served = load_served("models:/chat/1", parallel=3, engine_options={"n_ctx": 512, "n_threads": 1})
    try:
        assert served.engine_name == "llama_cpp_batched" and served.max_concurrency == 3
        assert served.llm.engine.n_ctx == 512
    finally:
        served.llm.close()
    with using(registry):
        served = load_served("models:/chat/1", engine="llama_cpp", engine_options={"n_threads": 1})
    try:
        assert served.engine_name == "llama_cpp" and served.max_concurrency == 1
    finally:
        served.llm.close()


def test_a_gguf_file_is_served_with_the_batching_engine():
    served = load_served(str(default_model_path()), engine_options={"n_ctx": 512, "n_threads": 1}, parallel=2)
    try:
        assert served.engine_name == "llama_cpp_batched" and served.max_concurrency == 2
    finally:
        served.llm.close()


def test_parallel_needs_a_batching_engine_and_engine_choices_an_llmflow_model(tmp_path):
    with pytest.raises(InvalidParams, match="one generation at a time"):
        load_served(str(default_model_path()), engine="llama_cpp", parallel=2)
    path = str(tmp_path / "echo")
    save_and_load(path)
    for overrides in ({"parallel": 2}, {"engine": "llama_cpp"}, {"engine_options": {"n_ctx": 512}}):
        with pytest.raises(InvalidParams, match="llmflow models and model files only"):
            load_served(path, **overrides)


def test_a_non_streaming_invocations_client_that_disconnects_cancels_the_prediction(http):
    before = wait_until_idle(http)
    rows = {"dataframe_split": {"columns": ["prompt"], "data": [["1, 2, 3, 4, 5,"]] * 3}}
    body = {**rows, "params": {"max_tokens": 400, "temperature": 0.0}}
    # the client gives up after half a second and closes its connection
    with (
        httpx.Client(base_url=str(http.base_url), timeout=0.5) as impatient,
        contextlib.suppress(httpx.TimeoutException),
    ):
        impatient.post("/invocations", json=body)
    after = wait_until_idle(http)  # its place is free again, long before 3 x 400 tokens
    generated = metric(after, "llmflow_generation_tokens_total") - metric(
        before, "llmflow_generation_tokens_total"
    )
    assert metric(after, "llmflow_requests_finished_total", outcome="cancelled") == (
        metric(before, "llmflow_requests_finished_total", outcome="cancelled") + 1
    )
    assert generated < 400
    assert http.post("/invocations", json={"prompt": "Hi", "max_tokens": 2}).status_code == 200


WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 16}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def test_llmflow_model_streams_structured_output_and_tool_calls_at_invocations(http):
    """The same params as `predict_stream`: a JSON Schema, and tools whose calls the final chunk
    carries (content chunks never hold a call)."""
    schema = {"enum": ["red", "green", "blue"]}
    body = {"prompt": "A colour?", "json_schema": json.dumps(schema), "max_tokens": 8, "stream": True}
    *texts, final = _chunks(http.post("/invocations", json=body))
    assert "".join(c["content"] for c in texts) in ('"red"', '"green"', '"blue"')
    assert final["finish_reason"] == "stop"

    body = {"prompt": "Weather in Kobe?", "tools": json.dumps(WEATHER_TOOLS), "tool_choice": "required",
            "max_tokens": 160, "stream": True}  # fmt: skip
    *texts, final = _chunks(http.post("/invocations", json=body))
    assert all(set(c) == {"content"} for c in texts) and "".join(c["content"] for c in texts) == ""
    assert final["finish_reason"] in ("tool_calls", "length"), final  # length: the calls that closed in time
    # How many calls the model makes is its own (greedy) choice; each must name the tool and fit its schema.
    assert final["tool_calls"]
    for call in final["tool_calls"]:
        assert call["function"]["name"] == "get_weather"
        assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


def test_llmflow_model_predict_joins_the_pipeline_and_answers_as_the_model_does(http, served_llm):
    """A non-streamed predict of an llmflow model: its rows are one generation of the server's
    (one request in /metrics, its tokens counted), answered as the pyfunc model answers in process."""
    from llmflow.mlflow import LlmflowPyfuncModel

    rows = [["Hi"], ["Name a colour."]]
    params = {**GREEDY, "max_tokens": 3, "details": True, "timings": True}
    body = {"dataframe_split": {"columns": ["prompt"], "data": rows}, "params": params}
    before = wait_until_idle(http)
    predictions = http.post("/invocations", json=body).json()["predictions"]
    after = wait_until_idle(http)

    in_process = LlmflowPyfuncModel.from_llm(served_llm.llm).predict(
        None, [r[0] for r in rows], params=params
    )
    assert [set(p) for p in predictions] == [set(p) for p in in_process]
    assert all(set(p["timings"]) == set(in_process[0]["timings"]) for p in predictions)
    finished = sum(
        metric(after, "llmflow_requests_finished_total", outcome=o)
        - metric(before, "llmflow_requests_finished_total", outcome=o)
        for o in ("stop", "length", "cancelled", "error")
    )
    assert finished == 1
    generated = metric(after, "llmflow_generation_tokens_total") - metric(
        before, "llmflow_generation_tokens_total"
    )
    assert generated == sum(p["usage"]["completion_tokens"] for p in predictions)

    struct = {
        "dataframe_records": [{"prompt": "Hi"}, {"prompt": " "}],
        "params": {"max_tokens": 2, "result": "struct"},
    }
    good, bad = http.post("/invocations", json=struct).json()["predictions"]
    assert good["error"] == "" and good["completion_tokens"] <= 2
    assert bad["finish_reason"] == "error" and bad["error"]
