"""Every way into llmflow takes a Hub model through the one resolver: `LLM.load`, the GGUF file,
its real split parts (llama.cpp loads the rest from the first), a safetensors repo (the
transformers engine), `llmflow chat` and `llmflow batch`."""

from __future__ import annotations

import pytest

from llmflow import LLM
from tests.hub.conftest import GGUF_REPO, SPLIT_REPO, TINY_REPO

GREEDY = {"max_tokens": 4, "temperature": 0.0}


def answer(llm: LLM) -> str:
    try:
        return "".join(chunk.text for chunk in llm.stream("Hi", GREEDY))
    finally:
        llm.close()


@pytest.fixture(scope="module")
def local_answer() -> str:
    return answer(LLM.load())


def test_llm_load_takes_a_hub_reference(hub, local_answer):
    llm = LLM.load(f"hf://{GGUF_REPO}:Q4_1")
    assert llm.engine.name == "llama_cpp"
    assert answer(llm) == local_answer  # the same weights as the embedded model


def test_a_split_model_loads_from_its_first_part(hub, local_answer):
    llm = LLM.load(f"hf://{SPLIT_REPO}")
    assert answer(llm) == local_answer


def test_a_safetensors_repo_loads_with_the_transformers_engine(hub):
    pytest.importorskip("torch")
    llm = LLM.load(f"hf://{TINY_REPO}", engine_options={"device": "cpu"})
    assert llm.engine.name == "transformers"
    assert isinstance(answer(llm), str)


def test_chat_takes_a_hub_reference(hub):
    from typer.testing import CliRunner

    from llmflow.cli import app

    result = CliRunner().invoke(app, ["chat", f"hf://{GGUF_REPO}:Q4_1", "--max-tokens", "3"], input="Hi\n")
    assert result.exit_code == 0, result.output
    assert "you>" in result.stdout and "finish:" in result.stderr


def test_batch_takes_a_hub_reference(hub, tmp_path):
    from llmflow.batch.models import model_uri
    from llmflow.mlflow.model_ref import logged_llmflow_config

    uri = model_uri(f"hf://{GGUF_REPO}:Q4_1", tmp_path)
    config = logged_llmflow_config(uri)
    assert config is not None and config["weights_path"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
