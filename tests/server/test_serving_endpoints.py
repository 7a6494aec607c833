"""Databricks Model Serving's path, `POST /serving-endpoints/{name}/invocations`, driven by MLflow's
own client: `mlflow.deployments.get_deploy_client("databricks")` with DATABRICKS_HOST pointing
at `llmflow serve` and DATABRICKS_TOKEN checked as its API key."""

from __future__ import annotations

import json

import httpx
import pytest
from mlflow.deployments import get_deploy_client
from requests import HTTPError

from tests.server.conftest import TIMEOUT_S, running, sse_events
from tests.server.schema_checks import check_chat_completion

KEY = "dapi-test-key"


@pytest.fixture(scope="module")
def endpoint(default_served):
    with running(default_served, api_key=KEY) as server:
        yield server


@pytest.fixture
def databricks(endpoint, monkeypatch):
    monkeypatch.setenv("DATABRICKS_HOST", endpoint.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", KEY)
    return get_deploy_client("databricks")


def test_predict_through_mlflows_databricks_client(databricks, default_served):
    inputs = {"inputs": {"prompt": ["Say hi.", "Say bye."]}, "params": {"max_tokens": 4}}
    answer = databricks.predict(endpoint=default_served.name, inputs=inputs)
    assert len(answer["predictions"]) == 2 and all(isinstance(p, str) for p in answer["predictions"])
    records = {"dataframe_records": [{"prompt": "Hi"}], "params": {"max_tokens": 3, "details": True}}
    (detail,) = databricks.predict(endpoint=default_served.name, inputs=records)["predictions"]
    assert detail["usage"]["completion_tokens"] <= 3


def test_predict_stream_through_mlflows_databricks_client(databricks, default_served):
    for inputs in (
        {"prompt": "Say hi.", "max_tokens": 5},
        {"messages": [{"role": "user", "content": "Hi"}], "params": {"max_tokens": 5}},
        {"inputs": {"prompt": ["Say hi."]}, "params": {"max_tokens": 5}},
    ):
        *texts, final = databricks.predict_stream(endpoint=default_served.name, inputs=inputs)
        assert texts and all(set(c) == {"content"} and c["content"] for c in texts)
        assert final["finish_reason"] in ("stop", "length") and final["usage"]["completion_tokens"] <= 5


def test_errors_in_databricks_shape_so_the_client_sees_their_status(databricks, endpoint, monkeypatch):
    with pytest.raises(HTTPError, match="404") as missing:
        databricks.predict(endpoint="someone-else", inputs={"prompt": "Hi"})
    assert "no serving endpoint 'someone-else'" in missing.value.response.json()["message"]
    monkeypatch.setenv("DATABRICKS_TOKEN", "wrong")
    with pytest.raises(HTTPError, match="401"):
        list(get_deploy_client("databricks").predict_stream(endpoint="x", inputs={"prompt": "Hi"}))
    response = httpx.post(f"{endpoint.url}/serving-endpoints/x/invocations", json={})
    assert response.status_code == 401 and response.json()["error_code"] == "UNAUTHENTICATED"


def test_the_stream_holds_only_data_lines(endpoint, default_served):
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"prompt": "Hi", "max_tokens": 3, "stream": True}
    path = f"/serving-endpoints/{default_served.name}/invocations"
    response = httpx.post(f"{endpoint.url}{path}", json=body, headers=headers, timeout=TIMEOUT_S)
    assert response.status_code == 200
    lines = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    assert sse_events(response.text)[-1] == "[DONE]"
    bad = httpx.post(
        f"{endpoint.url}{path}", json={**body, "max_tokens": -1}, headers=headers, timeout=TIMEOUT_S
    )
    assert bad.status_code == 400 and "max_tokens" in bad.json()["message"]


def test_pings_keep_invocations_alive_but_never_reach_the_databricks_path(
    endpoint, default_served, monkeypatch
):
    monkeypatch.setattr("llmflow.server.invocations.PING_INTERVAL_S", 0.001)
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"prompt": "Count to twenty: 1, 2, 3,", "max_tokens": 24, "temperature": 0, "stream": True}
    with httpx.Client(base_url=endpoint.url, headers=headers, timeout=TIMEOUT_S) as http:
        pinged = http.post("/invocations", json=body).text
        strict = http.post(f"/serving-endpoints/{default_served.name}/invocations", json=body).text
    assert ": ping" in pinged
    assert ": ping" not in strict and all(line.startswith("data: ") for line in strict.split("\n") if line)


def test_predict_a_chat_body_is_a_chat_completion_through_mlflows_client(databricks, default_served):
    inputs = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 5}
    answer = databricks.predict(endpoint=default_served.name, inputs=inputs)
    completion = check_chat_completion(json.loads(json.dumps(answer)))
    assert completion.model == default_served.name and len(completion.choices) == 1
    assert completion.choices[0].message.role == "assistant" and completion.usage.completion_tokens <= 5
    *texts, final = databricks.predict_stream(endpoint=default_served.name, inputs=inputs)
    assert all(set(c) == {"content"} for c in texts) and final["usage"]["completion_tokens"] <= 5


def test_predict_an_llm_body_is_wrapped_in_predictions_on_the_databricks_path_only(
    databricks, endpoint, default_served
):
    answer = databricks.predict(endpoint=default_served.name, inputs={"prompt": "Say hi.", "max_tokens": 3})
    assert set(answer) == {"predictions"} and [type(p) for p in answer["predictions"]] == [str]
    headers = {"Authorization": f"Bearer {KEY}"}
    bare = httpx.post(
        f"{endpoint.url}/invocations",
        json={"prompt": "Say hi.", "max_tokens": 3},
        headers=headers,
        timeout=TIMEOUT_S,
    )
    assert bare.status_code == 200 and isinstance(bare.json(), list)  # as `mlflow models serve` answers
