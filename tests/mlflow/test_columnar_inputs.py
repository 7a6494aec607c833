"""MLflow's columnar body formats (`inputs`, `instances`) for an llmflow model: MLflow turns them
into a dict of numpy arrays, which the model reads as one row per element, in `predict` (N
answers) and `predict_stream` (one row), through MLflow's own scoring server (in process, and
`mlflow models serve` itself as a process on 127.0.0.1) and through `llmflow serve`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from mlflow.pyfunc import scoring_server

from llmflow.errors import InvalidRequest
from llmflow.mlflow.inputs import parse_rows
from llmflow.server import ServedModel
from llmflow.types import Message
from tests.bench.servers import free_port
from tests.server.conftest import TIMEOUT_S, running, sse_events, wait_healthy

HI = {"role": "user", "content": "Hi"}
YO = {"role": "user", "content": "Yo"}
PARAMS = {"max_tokens": 3}

#: body -> how many answers
BODIES = {
    "inputs-prompt": ({"inputs": {"prompt": ["Say hi.", "Say bye."]}, "params": PARAMS}, 2),
    "inputs-one-prompt": ({"inputs": {"prompt": ["Say hi."]}, "params": PARAMS}, 1),
    "inputs-prompt-string": ({"inputs": {"prompt": "Say hi."}, "params": PARAMS}, 1),
    "instances-prompt": ({"instances": [{"prompt": "Say hi."}, {"prompt": "Bye"}], "params": PARAMS}, 2),
    "instances-one-prompt": ({"instances": [{"prompt": "Say hi."}], "params": PARAMS}, 1),
    "inputs-messages": ({"inputs": {"messages": [HI, {"role": "assistant", "content": "Hey"}, YO]}}, 1),
}


def test_columns_are_rows():
    assert parse_rows({"prompt": np.array(["a", "b"])}) == ["a", "b"]
    assert parse_rows({"prompt": np.array("a")}) == ["a"]
    conversations = np.empty(2, dtype=object)
    conversations[:] = [[HI], [HI, YO]]
    assert parse_rows({"messages": conversations}) == [
        [Message("user", "Hi")],
        [Message("user", "Hi"), Message("user", "Yo")],
    ]
    assert parse_rows({"messages": np.array([[HI], [YO]], dtype=object)}) == [
        [Message("user", "Hi")],
        [Message("user", "Yo")],
    ]
    assert parse_rows({"messages": np.array([HI, YO], dtype=object)}) == [
        [Message("user", "Hi"), Message("user", "Yo")]
    ]
    with pytest.raises(InvalidRequest, match="different lengths"):
        parse_rows({"prompt": np.array(["a", "b"]), "messages": np.array([[HI]], dtype=object)})
    with pytest.raises(InvalidRequest) as bad:
        parse_rows({"prompt": np.array(["a", ""])})
    assert bad.value.param == "input[1].prompt"


def test_predict_and_predict_stream_in_process(loaded):
    assert len(loaded.predict({"prompt": np.array(["Say hi.", "Bye"])}, params=PARAMS)) == 2
    *texts, final = loaded.predict_stream({"prompt": np.array(["Say hi."])}, params=PARAMS)
    assert texts and final["usage"]["completion_tokens"] <= 3


@pytest.fixture(scope="module")
def mlflow_serve(loaded, monkeypatch_module):
    monkeypatch_module.setenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", "false")  # init() sets it; restored after
    with TestClient(scoring_server.init(loaded)) as client:
        yield client


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def mlflow_models_serve(logged):
    """`mlflow models serve` itself, in its own process group on 127.0.0.1, on the logged model."""
    url = f"http://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", logged.model_uri,
               "--env-manager", "local", "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1]]  # fmt: skip
    # it runs `uvicorn` by name: the one beside this Python, whether or not its folder is on PATH
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {**os.environ, "MLFLOW_TRACKING_URI": logged.store.uri, "PATH": path}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        wait_healthy(process, url)
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
            yield client
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def llmflow_serve(loaded):
    with (
        running(ServedModel.from_pyfunc(loaded, "smollm2")) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client,
    ):
        yield client


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("server", ["mlflow_serve", "mlflow_models_serve", "llmflow_serve"])
def test_each_body_format_answers_every_row(request, server, name):
    body, rows = BODIES[name]
    http = request.getfixturevalue(server)
    response = http.post("/invocations", json=body)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == rows and all(isinstance(p, str) for p in predictions)


@pytest.mark.parametrize("name", [n for n, (_, rows) in BODIES.items() if rows == 1])
def test_one_row_streams_from_llmflow_serve(llmflow_serve, name):
    body, _ = BODIES[name]
    response = llmflow_serve.post("/invocations", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    *texts, final = [json.loads(e) for e in sse_events(response.text)[:-1]]
    assert texts and all(c["content"] for c in texts) and final["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize("server", ["mlflow_serve", "llmflow_serve"])
def test_columns_of_conversations_are_refused_by_mlflows_schema_check(request, server):
    """The signature types `messages` as one conversation, so MLflow refuses a column of them
    before the model sees it (send several conversations as `dataframe_records`)."""
    http = request.getfixturevalue(server)
    for body in ({"inputs": {"messages": [[HI], [YO]]}}, {"instances": [{"messages": [HI]}]}):
        response = http.post("/invocations", json=body)
        assert response.status_code == 400 and "schema" in response.json()["message"]
    records = {"dataframe_records": [{"messages": [HI]}, {"messages": [YO]}], "params": PARAMS}
    assert len(http.post("/invocations", json=records).json()["predictions"]) == 2


@pytest.mark.parametrize("server", ["mlflow_serve", "llmflow_serve"])
def test_a_ragged_or_empty_column_is_a_400(request, server):
    http = request.getfixturevalue(server)
    response = http.post("/invocations", json={"inputs": {"prompt": ["Say hi.", " "]}})
    assert response.status_code == 400 and "input[1].prompt" in response.json()["message"]
    two_rows = {"inputs": {"prompt": ["a", "b"]}, "stream": True}
    if server == "llmflow_serve":
        assert http.post("/invocations", json=two_rows).status_code == 400  # a stream answers one row
