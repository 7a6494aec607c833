"""What a saved or logged llmflow model holds: streamable, no pickles, pinned requirements,
weights as the "model" artifact (or a reference), and MLflow's scoring server can answer it."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import mlflow
import pytest
import yaml

import llmflow.mlflow
from llmflow.errors import ChatTemplateError, InvalidParams, ModelNotFound, UnknownEngine
from llmflow.mlflow import find_llm
from llmflow.model_files import default_model_path
from llmflow.prompts import PromptMap
from tests.mlflow.store import using

SMOL_CHATML = {
    "system": "<|im_start|>system\n{}<|im_end|>\n",
    "user": "<|im_start|>user\n{}<|im_end|>\n",
    "assistant": "<|im_start|>assistant\n{}<|im_end|>\n",
}


@pytest.fixture(scope="module")
def downloaded(logged, tmp_path_factory) -> Path:
    """The logged model's files, as MLflow stored them."""
    with using(logged.store):
        target = tmp_path_factory.mktemp("downloaded")
        return Path(mlflow.artifacts.download_artifacts(logged.model_uri, dst_path=str(target)))


def mlmodel(path: Path) -> dict:
    return yaml.safe_load((path / "MLmodel").read_text())


def test_the_logged_model_is_streamable_code_with_no_pickles(downloaded):
    flavor = mlmodel(downloaded)["flavors"]["python_function"]
    assert flavor["streamable"] is True
    assert flavor["loader_module"] == "mlflow.pyfunc.loaders.code_model"
    assert (downloaded / "model_code.py").is_file()
    assert "python_model" not in flavor
    assert not list(downloaded.rglob("*.pkl"))
    assert not list(downloaded.rglob("*.pickle"))


def test_the_weights_are_the_model_artifact(downloaded):
    flavor = mlmodel(downloaded)["flavors"]["python_function"]
    artifact = downloaded / flavor["artifacts"]["model"]["path"]
    assert artifact.stat().st_size == default_model_path().stat().st_size
    assert mlmodel(downloaded)["model_size_bytes"] >= artifact.stat().st_size


def test_the_config_says_how_to_rebuild_the_llm(downloaded):
    config = mlmodel(downloaded)["flavors"]["python_function"]["config"]
    assert config["engine"] == "llama_cpp"
    assert config["default_params"]["max_tokens"] == 12
    assert config["format_version"] == 1
    assert "weights_path" not in config


def test_requirements_pin_the_engine_and_name_llmflow(downloaded):
    requirements = (downloaded / "requirements.txt").read_text().splitlines()
    assert f"llama-cpp-python=={importlib.metadata.version('llama-cpp-python')}" in requirements
    assert any(r.startswith("llmflow") for r in requirements)
    assert any(r.startswith("mlflow==") for r in requirements)


def test_the_signature_and_input_example_are_logged(downloaded):
    model = mlmodel(downloaded)
    params = {p["name"]: p for p in json.loads(model["signature"]["params"])}
    assert params["max_tokens"]["default"] == 12
    assert params["stop"]["type"] == "string"
    assert params["stop_sequences"]["shape"] == [-1]
    example = json.loads((downloaded / "input_example.json").read_text())
    assert example == {"prompt": "What is MLflow?"}


def test_save_model_to_a_directory_and_load_it(tmp_path):
    path = tmp_path / "smol"
    llmflow.mlflow.save_model(path, prompt_map=SMOL_CHATML, post_prompt="<|im_start|>assistant\n")
    model = mlflow.pyfunc.load_model(str(path))
    try:
        llm = find_llm(model)
        assert isinstance(llm.prompt_format, PromptMap)
        chunks = list(model.predict_stream({"prompt": "Hi"}, params={"max_tokens": 3}))
        assert chunks[-1]["finish_reason"] in {"stop", "length"}
    finally:
        find_llm(model).close()


def test_by_reference_records_the_path_and_copies_nothing(tmp_path):
    weights = tmp_path / "weights" / "smol.gguf"
    weights.parent.mkdir()
    weights.write_bytes(default_model_path().read_bytes())
    path = tmp_path / "ref"
    llmflow.mlflow.save_model(path, weights, by_reference=True)
    assert not (path / "artifacts").exists()
    assert mlmodel(path)["flavors"]["python_function"]["config"]["weights_path"] == str(weights)
    model = mlflow.pyfunc.load_model(str(path))
    find_llm(model).close()
    weights.unlink()
    with pytest.raises(ModelNotFound, match="logged by reference"):
        mlflow.pyfunc.load_model(str(path))


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"engine": "warp_drive"}, UnknownEngine),
        ({"default_params": {"temperature": -1}}, InvalidParams),
        ({"default_params": {"max_tokenz": 5}}, InvalidParams),
        ({"prompt_map": {"user": "no placeholder"}}, ChatTemplateError),
        ({"chat_template": "{% if %}"}, ChatTemplateError),
        ({"model": "no/such/file.gguf"}, ModelNotFound),
    ],
)
def test_bad_options_fail_before_anything_is_written(tmp_path, options, error):
    with pytest.raises(error):
        llmflow.mlflow.save_model(tmp_path / "m", **options)
    assert not (tmp_path / "m").exists()


def test_mlflow_scoring_server_answers_and_serialises(loaded):
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server

    client = TestClient(scoring_server.init(loaded))
    rows = [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]
    body = {"dataframe_records": rows, "params": {"max_tokens": 2}}
    answer = client.post("/invocations", json=body)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["predictions"]) == 3
    body["params"]["details"] = True
    rows = client.post("/invocations", json=body).json()["predictions"]
    assert [set(r) for r in rows] == [{"content", "finish_reason", "usage"}] * 3
    bad = client.post("/invocations", json={"dataframe_records": [{"messages": []}]})
    assert bad.status_code == 400
    assert "at least one message" in bad.json()["message"]


def test_requirements_drop_local_version_labels():
    from llmflow.mlflow.requirements import _public_version

    assert _public_version("2.13.0+cpu") == "2.13.0"
    assert _public_version("0.3.36") == "0.3.36"
