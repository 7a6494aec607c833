"""PEFT LoRA adapters on the transformers engine, on a tiny random Llama made here: adapters with
random non-zero B weights (peft's `get_peft_model`, `save_pretrained`). Scale 0 is the base
model, scale 1 is not, two adapters differ from each other; a request picks one by name (`lora`,
or `model` as BASE:ADAPTER on the server); adapters load and unload while the model is loaded;
`llmflow log --lora NAME=DIR` logs one with the model and the loaded model applies it. An unknown
adapter, a directory that is no adapter and an adapter of another shape are refused clearly."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import mlflow
import pytest

from tests.extras import missing

pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))
pytest.importorskip("peft", reason=missing("peft", "transformers"))

from typer.testing import CliRunner

import llmflow.mlflow
from llmflow import LLM, CancelToken
from llmflow.cli import app
from llmflow.errors import AdapterLoadFailed, InvalidParams, UnknownAdapter
from llmflow.params import SamplingParams
from llmflow.server import ServedModel
from tests.fakes.hf_models import byte_tokenizer, tiny_llama, write_tiny_model
from tests.mlflow.store import Store, using
from tests.server.conftest import TIMEOUT_S, running

PROMPT = "Tell me about Osaka."
GREEDY = {"temperature": 0.0, "max_tokens": 16}
ON_CPU = {"device": "cpu", "ignore_eos": True}


def write_peft_adapter(base: Path, out: Path, seed: int) -> Path:
    """A PEFT LoRA adapter of `base` with random weights, B included (PEFT starts B at zero,
    which would leave the model as it is)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"])
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The tiny model, two adapters of its shape and one of a wider model's."""
    where = tmp_path_factory.mktemp("peft")
    base = write_tiny_model(where / "tiny")
    wider = where / "wider"
    tokenizer = byte_tokenizer()
    tiny_llama(tokenizer, hidden=128).save_pretrained(wider)
    tokenizer.save_pretrained(wider)
    return {
        "base": base,
        "a": write_peft_adapter(base, where / "a", seed=1),
        "b": write_peft_adapter(base, where / "b", seed=2),
        "wrong": write_peft_adapter(wider, where / "wrong", seed=3),
    }


@pytest.fixture(scope="module")
def llm(made):
    options = {**ON_CPU, "lora": {"a": str(made["a"]), "b": str(made["b"])}}
    loaded = LLM.load(made["base"], engine="transformers", engine_options=options)
    yield loaded
    loaded.close()


def _text(llm: LLM, **params) -> str:
    return llm.generate(PROMPT, {**GREEDY, **params}).text


def test_scale_zero_is_the_base_model_and_each_adapter_its_own(llm):
    base = _text(llm)
    assert llm.engine.lora_names == ("a", "b")
    assert _text(llm, lora="a", lora_scale=0.0) == base
    adapted = {name: _text(llm, lora=name) for name in ("a", "b")}
    assert len({base, *adapted.values()}) == 3
    assert _text(llm) == base  # switching back: the adapters are off again
    assert _text(llm, lora="b") == adapted["b"] and _text(llm, lora="a") == adapted["a"]
    assert _text(llm, lora="a", lora_scale=2.0) not in (base, adapted["a"])
    assert _text(llm, lora="a") == adapted["a"]  # the scale is set per request, not added up


def test_unknown_or_foreign_adapters_are_refused(llm, made, tmp_path):
    with pytest.raises(UnknownAdapter) as unknown:
        llm.prepare(PROMPT, {"lora": "nope"})
    assert unknown.value.param == "lora" and "'a'" in str(unknown.value)
    with pytest.raises(AdapterLoadFailed, match=r"adapter_config\.json"):
        llm.engine.load_adapter("x", str(tmp_path))
    with pytest.raises(AdapterLoadFailed) as foreign:
        llm.engine.load_adapter("wrong", str(made["wrong"]))
    assert foreign.value.param == "lora"
    assert llm.engine.lora_names == ("a", "b")
    assert _text(llm, lora="a") != _text(llm)  # the model is as it was
    with pytest.raises(InvalidParams, match="continuous_batching"):
        LLM.load(
            made["base"],
            engine="transformers",
            engine_options={**ON_CPU, "continuous_batching": True, "lora": {"a": str(made["a"])}},
        )


def test_adapters_load_and_unload_while_served(llm, made):
    solo = {None: _text(llm), "a": _text(llm, lora="a")}
    llm.engine.unload_adapter("b")
    served = ServedModel.from_llm(llm, "tiny")
    try:
        with running(served) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:

            def chat(model: str) -> httpx.Response:
                body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], **GREEDY}
                return http.post("/v1/chat/completions", json=body)

            assert chat("tiny:b").status_code == 404
            loaded = http.post("/v1/lora-adapters", json={"name": "b", "path": str(made["b"])})
            assert loaded.status_code == 200, loaded.text
            assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["tiny", "tiny:a", "tiny:b"]
            answers = {name: chat(f"tiny:{name}" if name else "tiny") for name in (None, "a", "b")}
            texts = {name: a.json()["choices"][0]["message"]["content"] for name, a in answers.items()}
        assert texts[None] == solo[None] and texts["a"] == solo["a"]
        assert texts["b"] not in (solo[None], solo["a"])
    finally:
        if "b" not in llm.engine.lora_names:
            llm.engine.load_adapter("b", str(made["b"]))


def test_an_adapter_loads_between_generations_never_under_one(llm, made):
    params = SamplingParams.parse({**GREEDY, "lora": "a"})
    tokens = llm.engine.generate(llm.tokenize(PROMPT), params, CancelToken())
    next(tokens)
    loader = threading.Thread(target=llm.engine.load_adapter, args=("c", str(made["b"])))
    loader.start()
    loader.join(0.5)
    assert loader.is_alive()  # it waits for the running generation
    closer = threading.Thread(target=tokens.close)  # closed from another thread, as a server may
    closer.start()
    loader.join(TIMEOUT_S)
    assert not loader.is_alive() and llm.engine.lora_names == ("a", "b", "c")
    llm.engine.unload_adapter("c")
    assert llm.engine.lora_names == ("a", "b")


def test_llmflow_log_takes_a_peft_directory_and_the_loaded_model_applies_it(llm, made, tmp_path):
    store = Store.create(tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "log",
            str(made["base"]),
            "--tracking-uri", store.uri,
            "--experiment", "tests",
            "--engine", "transformers",
            "--engine-option", "device=cpu",
            "--engine-option", "ignore_eos=true",
            "--lora", f"a={made['a']}",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    uri = result.stdout.strip().splitlines()[-1]
    with using(store):
        loaded = mlflow.pyfunc.load_model(uri)
    found = llmflow.mlflow.find_llm(loaded)
    try:
        assert found.engine.lora_names == ("a",)
        params = {"temperature": 0.0, "max_tokens": 16}
        (adapted,) = loaded.predict({"prompt": PROMPT}, params={**params, "lora": "a"})
        (base,) = loaded.predict({"prompt": PROMPT}, params=params)
    finally:
        found.close()
    assert adapted == _text(llm, lora="a") and base == _text(llm)

    bad_args = ["log", str(made["base"]), "--engine", "transformers", "--lora", "a=/nowhere"]
    bad = CliRunner().invoke(app, bad_args)
    assert bad.exit_code == 2 and "PEFT adapter directory" in bad.stderr
