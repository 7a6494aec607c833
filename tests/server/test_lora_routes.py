"""A LoRA adapter picked on every way in, not only OpenAI's chat and completions: `/v1/responses`
(`model: BASE:ADAPTER`, or the `lora` / `lora_scale` extensions), MLflow's `/responses`,
Anthropic's `/v1/messages` (`model: BASE:ADAPTER`), `/invocations` (`lora`, `lora_scale` params)
and the logged model's `predict_stream(..., params={"lora": ...})`. Each answers what chat answers
with the same adapter (one loaded model, greedy, compared between runs); scale 0 is the base
model. An adapter that is not loaded is refused in each protocol's own error shape, naming the
field that asked for it."""

from __future__ import annotations

import json

import anthropic
import httpx
import mlflow
import pytest
from mlflow.exceptions import MlflowException
from openai import NotFoundError, OpenAI

import llmflow.mlflow
from llmflow.server import ServedModel
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, running, sse_events

#: making the adapters runs llama.cpp's converter (torch and transformers)
pytestmark = pytest.mark.timeout(1200)
NAME = "m"
PROMPT = "Tell me about cats."
MESSAGES = [{"role": "user", "content": PROMPT}]
GREEDY = {"temperature": 0, "max_tokens": 12}
#: temperature is not among the arguments of recent Anthropic SDKs
GREEDY_BODY = {"temperature": 0}


@pytest.fixture(scope="module")
def pyfunc(lora_adapters, tmp_path_factory):
    """The embedded model logged with adapter `a` and loaded as MLflow loads it; nothing reused
    across requests, so that a prompt computes the same numbers whichever route sent it."""
    store = Store.create(tmp_path_factory.mktemp("lora-routes"))
    with using(store), mlflow.start_run(experiment_id=store.experiment_id):
        info = llmflow.mlflow.log_model(
            "model",
            lora={"a": str(lora_adapters["a"])},
            engine="llama_cpp",
            engine_options={"prompt_cache": False},
        )
        loaded = mlflow.pyfunc.load_model(info.model_uri)
    served = ServedModel.from_pyfunc(loaded, NAME)
    yield loaded, served
    served.llm.close()


@pytest.fixture(scope="module")
def server(pyfunc):
    with running(pyfunc[1]) as background:
        yield background


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture
def openai_client(server) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def _chat(http: httpx.Client, model: str, **extra) -> str:
    answer = http.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES, **GREEDY, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def texts(server) -> dict[str, str]:
    """Chat's answers: the base model's and adapter a's (which differ)."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        found = {"base": _chat(http, NAME), "a": _chat(http, f"{NAME}:a")}
    assert found["base"] != found["a"]
    return found


def test_the_responses_route_picks_an_adapter_by_model_or_extension(openai_client, texts):
    def respond(model: str, **extra) -> str:
        return openai_client.responses.create(
            model=model, input=PROMPT, temperature=0, max_output_tokens=12, extra_body=extra or None
        ).output_text

    assert respond(f"{NAME}:a") == texts["a"]
    assert respond(NAME, lora="a") == texts["a"]
    assert respond(f"{NAME}:a", lora_scale=0.0) == texts["base"]
    assert respond(NAME) == texts["base"]
    streamed = openai_client.responses.create(
        model=f"{NAME}:a", input=PROMPT, temperature=0, max_output_tokens=12, stream=True
    )
    ended = list(streamed)[-1]  # completed, or incomplete at max_output_tokens
    assert ended.type in ("response.completed", "response.incomplete")
    assert ended.response.output_text == texts["a"]


def test_mlflow_responses_route_picks_an_adapter_by_model(http, texts):
    def agent(model: str, **custom) -> str:
        body = {"model": model, "input": MESSAGES, "custom_inputs": {**GREEDY, **custom}}
        answer = http.post("/responses", json=body)
        assert answer.status_code == 200, answer.text
        return answer.json()["output"][0]["content"][0]["text"]

    assert agent(f"{NAME}:a") == texts["a"]
    assert agent(NAME, lora="a") == texts["a"]
    assert agent(f"{NAME}:a", lora_scale=0.0) == texts["base"]


def test_the_messages_route_picks_an_adapter_by_model(server, texts):
    sdk = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)

    def message(model: str) -> str:
        answer = sdk.messages.create(model=model, max_tokens=12, messages=MESSAGES, extra_body=GREEDY_BODY)
        return "".join(block.text for block in answer.content if block.type == "text")

    assert message(f"{NAME}:a") == texts["a"]
    assert message(NAME) == texts["base"]
    with sdk.messages.stream(
        model=f"{NAME}:a", max_tokens=12, messages=MESSAGES, extra_body=GREEDY_BODY
    ) as stream:
        assert "".join(stream.text_stream) == texts["a"]


def test_invocations_and_predict_stream_pick_an_adapter_by_param(http, pyfunc, texts):
    body = {"messages": MESSAGES, **GREEDY}
    (whole,) = http.post("/invocations", json={**body, "lora": "a"}).json()
    assert whole == texts["a"]
    split = {"inputs": {"messages": MESSAGES}, "params": {**GREEDY, "lora": "a"}}
    assert http.post("/invocations", json=split).json() == {"predictions": [texts["a"]]}
    scaled = http.post("/invocations", json={**body, "lora": "a", "lora_scale": 0.0}).json()
    assert scaled == [texts["base"]]
    streamed = http.post("/invocations", json={**body, "lora": "a", "stream": True})
    chunks = [json.loads(event) for event in sse_events(streamed.text) if event != "[DONE]"]
    assert "".join(chunk["content"] for chunk in chunks) == texts["a"]

    loaded = pyfunc[0]
    params = {"temperature": 0.0, "max_tokens": 12}
    in_process = loaded.predict_stream({"messages": MESSAGES}, params={**params, "lora": "a"})
    assert "".join(chunk["content"] for chunk in in_process) == texts["a"]
    base = loaded.predict_stream({"messages": MESSAGES}, params={**params, "lora": "a", "lora_scale": 0.0})
    assert "".join(chunk["content"] for chunk in base) == texts["base"]


def test_an_adapter_not_loaded_is_refused_on_every_route_naming_the_field(
    http, openai_client, server, pyfunc
):
    chat = http.post("/v1/chat/completions", json={"model": f"{NAME}:nope", "messages": MESSAGES})
    assert chat.status_code == 404 and chat.json()["error"]["param"] == "model"

    with pytest.raises(NotFoundError) as by_model:
        openai_client.responses.create(model=f"{NAME}:nope", input=PROMPT)
    assert by_model.value.body["param"] == "model" and "'nope'" in by_model.value.body["message"]
    with pytest.raises(NotFoundError) as by_field:
        openai_client.responses.create(model=NAME, input=PROMPT, extra_body={"lora": "nope"})
    assert by_field.value.body["param"] == "lora"

    agent = http.post("/responses", json={"model": f"{NAME}:nope", "input": MESSAGES})
    assert agent.status_code == 404 and agent.json()["error"]["param"] == "model"

    sdk = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    with pytest.raises(anthropic.NotFoundError) as messages:
        sdk.messages.create(model=f"{NAME}:nope", max_tokens=4, messages=MESSAGES)
    assert messages.value.body["type"] == "error"
    assert messages.value.body["error"]["message"].startswith("model: no LoRA adapter 'nope'")

    for stream in (False, True):
        refused = http.post("/invocations", json={"messages": MESSAGES, "lora": "nope", "stream": stream})
        assert refused.status_code in (400, 404), refused.text
        assert set(refused.json()) >= {"error_code", "message"} and "lora" in refused.json()["message"]
    with pytest.raises(MlflowException, match="lora"):  # MLflow's wrapper raises at the first chunk
        list(pyfunc[0].predict_stream({"messages": MESSAGES}, params={"lora": "nope"}))

    endpoint = http.post(f"/serving-endpoints/{NAME}:a/invocations", json={"messages": MESSAGES})
    assert endpoint.status_code == 404 and "`lora` param" in endpoint.json()["message"]
