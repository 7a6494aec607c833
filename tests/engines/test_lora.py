"""LoRA adapters on the embedded model, made by the project's own script (random weights on the
model's shape, through llama.cpp's converter): scale 0 is the base model, scale 1 is not; a
served model picks one per request (`lora`, or `model` as BASE:ADAPTER); concurrent requests with
different adapters each get their solo answer, on both llama.cpp engines (the batching one never
mixes adapters in one pass); adapters load and unload while the model is served; one logged with
the model survives log -> register -> load -> serve. An unknown adapter or one of another shape is
refused clearly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import mlflow
import pytest

import llmflow.mlflow
from llmflow import LLM
from llmflow.errors import AdapterLoadFailed, UnknownAdapter
from llmflow.server import ServedModel, load_served
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, running

GREEDY = {"temperature": 0, "max_tokens": 12}
#: making the adapters runs llama.cpp's converter (torch and transformers) three times
pytestmark = pytest.mark.timeout(1200)
PROMPT = "Tell me about cats."


@pytest.fixture(scope="module")
def adapters(lora_adapters) -> dict[str, Path]:
    """Two adapters of the embedded model's shape (different seeds) and one of another shape."""
    return lora_adapters


@pytest.fixture(scope="module")
def llm(adapters):
    loaded = LLM.load(engine="llama_cpp", engine_options={"lora": {"a": str(adapters["a"])}})
    yield loaded
    loaded.close()


def _text(llm: LLM, **params) -> str:
    return llm.generate(PROMPT, {**GREEDY, **params}).text


def test_scale_zero_is_the_base_model_and_scale_one_is_not(llm):
    base = _text(llm)
    assert _text(llm, lora="a", lora_scale=0.0) == base
    adapted = _text(llm, lora="a")
    assert adapted != base
    assert _text(llm) == base  # switching back: nothing computed under the adapter is reused
    assert _text(llm, lora="a") == adapted


def test_an_unknown_adapter_or_one_of_another_shape_is_refused(llm, adapters):
    with pytest.raises(UnknownAdapter) as unknown:
        llm.prepare(PROMPT, {"lora": "nope"})
    assert unknown.value.param == "lora" and "'a'" in str(unknown.value)
    with pytest.raises(AdapterLoadFailed, match="shape"):
        llm.engine.load_adapter("wrong", str(adapters["wrong"]))
    assert llm.engine.lora_names == ("a",)
    with pytest.raises(AdapterLoadFailed):
        LLM.load(engine="llama_cpp", engine_options={"lora": {"wrong": str(adapters["wrong"])}})


@pytest.fixture(scope="module")
def batched(adapters):
    """The batching engine with both adapters; nothing reused across requests, so that a request
    computes the same numbers alone or beside others."""
    lora = {"a": str(adapters["a"]), "b": str(adapters["b"])}
    loaded = LLM.load(
        engine="llama_cpp_batched", parallel=4, engine_options={"lora": lora, "prompt_cache": False}
    )
    yield loaded
    loaded.close()


def test_the_batching_engine_never_mixes_adapters_in_one_pass(batched):
    solo = {name: _text(batched, lora=name) for name in (None, "a", "b")}
    assert solo[None] == _text(batched, lora="a", lora_scale=0.0)
    assert len(set(solo.values())) == 3
    names = [None, "a", "b", "a", None, "b"]
    with ThreadPoolExecutor(len(names)) as pool:
        together = list(pool.map(lambda name: _text(batched, lora=name), names))
    assert together == [solo[name] for name in names]
    assert batched.engine.stats().steps > 0


def test_a_served_model_picks_adapters_per_request_and_loads_them_while_serving(llm, adapters):
    solo = {None: _text(llm), "a": _text(llm, lora="a")}
    served = ServedModel.from_llm(llm)
    with running(served) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        models = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert models == [served.name, f"{served.name}:a"]

        loaded = http.post("/v1/lora-adapters", json={"name": "b", "path": str(adapters["b"])})
        assert loaded.status_code == 200, loaded.text
        solo["b"] = _text(llm, lora="b")
        assert solo["b"] not in (solo[None], solo["a"])

        def chat(model: str) -> str:
            body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], **GREEDY}
            answer = http.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            return answer.json()["choices"][0]["message"]["content"]

        names = [served.name, f"{served.name}:a", f"{served.name}:b"] * 2
        with ThreadPoolExecutor(len(names)) as pool:
            answers = list(pool.map(chat, names))
        assert answers == [solo[None], solo["a"], solo["b"]] * 2

        unknown = http.post(
            "/v1/chat/completions",
            json={"model": f"{served.name}:nope", "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
        wrong = http.post("/v1/lora-adapters", json={"name": "w", "path": str(adapters["wrong"])})
        assert wrong.status_code == 400 and "shape" in wrong.json()["error"]["message"]
        assert http.delete("/v1/lora-adapters/b").json()["adapters"] == [
            {"name": "a", "id": f"{served.name}:a"}
        ]
        gone = http.post("/v1/completions", json={"model": served.name, "prompt": "Hi", "lora": "b"})
        assert gone.status_code == 404


def test_an_adapter_survives_log_register_load_and_serve(adapters, tmp_path):
    store = Store.create(tmp_path)
    with using(store), mlflow.start_run(experiment_id=store.experiment_id):
        info = llmflow.mlflow.log_model(
            "model", lora={"a": str(adapters["a"])}, registered_model_name="adapted", engine="llama_cpp"
        )
        served = load_served(f"models:/adapted/{info.registered_model_version}")
    try:
        assert served.llm.engine.name == "llama_cpp_batched"
        assert served.llm.engine.lora_names == ("a",)
        with running(served) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:

            def complete(model: str) -> str:
                answer = http.post("/v1/completions", json={"model": model, "prompt": PROMPT, **GREEDY})
                assert answer.status_code == 200, answer.text
                return answer.json()["choices"][0]["text"]

            base, adapted = complete(served.name), complete(f"{served.name}:a")
        assert adapted != base  # the logged adapter applies
        assert served.llm.generate(PROMPT, {**GREEDY, "lora": "a"}, raw=True).text == adapted
    finally:
        served.llm.close()
