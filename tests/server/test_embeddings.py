"""POST /v1/embeddings on the embedded model loaded with a pooling type (a chat model has none of
its own; its pooled hidden states are embeddings all the same), over real HTTP and the official
`openai` client; and from a logged MLflow model."""

from __future__ import annotations

import base64
import math
from array import array

import httpx
import mlflow
import pytest
from openai import OpenAI

import llmflow.mlflow
from llmflow import LLM
from llmflow.embeddings import embed
from llmflow.server import load_served
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, running

TEXTS = ["Osaka Castle is famous.", "大阪城は有名です。", "The weather is nice today", "x"]
POOLED = {"pooling": "mean", "n_ctx": 512}


@pytest.fixture(scope="module")
def pooled_served():
    served = load_served(None, engine_options=POOLED)
    yield served
    served.llm.close()


@pytest.fixture(scope="module")
def embedding_server(pooled_served):
    with running(pooled_served) as server:
        yield server


@pytest.fixture
def ehttp(embedding_server):
    with httpx.Client(base_url=embedding_server.url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture
def eclient(embedding_server) -> OpenAI:
    return OpenAI(base_url=f"{embedding_server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def _embed(http, model, inputs, **extra):
    answer = http.post("/v1/embeddings", json={"model": model, "input": inputs, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _close(a, b, tol=1e-4):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def test_shapes_usage_and_unit_length(ehttp, pooled_served):
    body = _embed(ehttp, pooled_served.name, TEXTS)

    assert body["object"] == "list" and body["model"] == pooled_served.name
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    sizes = {len(d["embedding"]) for d in body["data"]}
    assert sizes == {576}  # SmolLM2-135M's hidden size
    for d in body["data"]:
        assert d["object"] == "embedding"
        assert abs(math.sqrt(sum(x * x for x in d["embedding"])) - 1.0) < 1e-5
    tokens = sum(len(pooled_served.llm.tokenize(t, add_special=True)) for t in TEXTS)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_deterministic_and_a_batch_equals_one_by_one(ehttp, pooled_served):
    name = pooled_served.name
    batch = [d["embedding"] for d in _embed(ehttp, name, TEXTS)["data"]]
    again = [d["embedding"] for d in _embed(ehttp, name, TEXTS)["data"]]
    single = [_embed(ehttp, name, text)["data"][0]["embedding"] for text in TEXTS]

    assert batch == again
    for a, b in zip(batch, single, strict=True):
        assert _close(a, b)
    # different texts, different vectors
    assert sum(x * y for x, y in zip(batch[0], batch[2], strict=True)) < 0.999


def test_token_ids_equal_their_text(ehttp, pooled_served):
    name = pooled_served.name
    ids = [pooled_served.llm.tokenize(t, add_special=True) for t in TEXTS[:2]]
    by_text = [d["embedding"] for d in _embed(ehttp, name, TEXTS[:2])["data"]]
    by_ids = [d["embedding"] for d in _embed(ehttp, name, ids)["data"]]
    one_list = _embed(ehttp, name, ids[0])["data"]

    assert len(one_list) == 1 and _close(one_list[0]["embedding"], by_text[0])
    for a, b in zip(by_text, by_ids, strict=True):
        assert _close(a, b)


def test_dimensions_truncates_and_renormalises(ehttp, pooled_served):
    name = pooled_served.name
    full = _embed(ehttp, name, TEXTS[0])["data"][0]["embedding"]
    short = _embed(ehttp, name, TEXTS[0], dimensions=64)["data"][0]["embedding"]

    assert len(short) == 64
    norm = math.sqrt(sum(x * x for x in full[:64]))
    assert _close(short, [x / norm for x in full[:64]], 1e-6)


def test_base64_round_trip(ehttp, pooled_served):
    name = pooled_served.name
    floats = _embed(ehttp, name, TEXTS[:2])["data"]
    packed = _embed(ehttp, name, TEXTS[:2], encoding_format="base64")["data"]

    for f, p in zip(floats, packed, strict=True):
        decoded = array("f")
        decoded.frombytes(base64.b64decode(p["embedding"]))
        assert _close(list(decoded), f["embedding"], 1e-6)


def test_official_client(eclient, pooled_served):
    default = eclient.embeddings.create(model=pooled_served.name, input=TEXTS[:3])  # asks for base64
    floats = eclient.embeddings.create(model=pooled_served.name, input=TEXTS[:3], encoding_format="float")

    assert [len(d.embedding) for d in default.data] == [576] * 3
    for a, b in zip(default.data, floats.data, strict=True):
        assert _close(a.embedding, b.embedding, 1e-6)
    assert default.usage.prompt_tokens == default.usage.total_tokens > 0


def test_the_one_at_a_time_engine_embeds_the_same(pooled_served):
    llm = LLM.load(engine="llama_cpp", engine_options=POOLED)
    try:
        alone = embed(llm, TEXTS).vectors
    finally:
        llm.close()
    served = embed(pooled_served.llm, TEXTS).vectors
    for a, b in zip(alone, served, strict=True):
        assert _close(a, b)


def test_bad_input_is_a_400_naming_the_field(ehttp, pooled_served):
    name = pooled_served.name
    cases = [
        ({"input": []}, "input"),
        ({"input": ""}, "input[0]"),
        ({"input": ["ok", ""]}, "input[1]"),
        ({"input": [[1, 10**9]]}, "input[0][1]"),
        ({"input": "hi", "dimensions": 0}, "dimensions"),
        ({"input": "hi", "dimensions": 100000}, "dimensions"),
        ({"input": "hi", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x " * 600}, "input[0]"),  # longer than the 512-token window
    ]
    for extra, field in cases:
        answer = ehttp.post("/v1/embeddings", json={"model": name, **extra})
        assert answer.status_code == 400, (extra, answer.text)
        assert answer.json()["error"]["param"] == field, (extra, answer.json())
    assert ehttp.post("/v1/embeddings", json={"model": "nope", "input": "hi"}).status_code == 404


def test_a_model_that_cannot_pool_is_a_400_naming_model(http, model_name):
    for _ in range(2):  # refused the same way once it knows
        answer = http.post("/v1/embeddings", json={"model": model_name, "input": "hi"})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "model" and "pooling" in error["message"]
    # generation is untouched
    chat = {"model": model_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert http.post("/v1/chat/completions", json=chat).status_code == 200


def test_a_logged_mlflow_model_serves_embeddings(tmp_path):
    store = Store.create(tmp_path)
    with using(store), mlflow.start_run(experiment_id=store.experiment_id):
        llmflow.mlflow.log_model(
            "model", registered_model_name="embedder", by_reference=True, engine_options=POOLED
        )
        served = load_served("models:/embedder/1")
    try:
        with running(served) as server:
            client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
            answer = client.embeddings.create(model="embedder", input=["a", "b"], dimensions=32)
        assert [len(d.embedding) for d in answer.data] == [32, 32]
    finally:
        served.llm.close()
