"""A Hugging Face model directory logged with engine="transformers" streams through MLflow like
the embedded GGUF model does."""

from __future__ import annotations

import pytest

from tests.extras import missing

pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))

import mlflow

import llmflow.mlflow
from llmflow.engines.hf import TransformersEngine
from tests.fakes.hf_models import write_tiny_model
from tests.mlflow.store import using


def test_hf_directory_logs_loads_and_streams(mlflow_store, tmp_path):
    model_dir = write_tiny_model(tmp_path / "tiny-hf")
    with using(mlflow_store), mlflow.start_run(experiment_id=mlflow_store.experiment_id):
        info = llmflow.mlflow.log_model(
            "hf",
            model_dir,
            engine="transformers",
            engine_options={"device": "cpu", "ignore_eos": True},
            default_params={"max_tokens": 8},
        )
        loaded = mlflow.pyfunc.load_model(info.model_uri)
    llm = llmflow.mlflow.find_llm(loaded)
    try:
        assert isinstance(llm.engine, TransformersEngine)
        chunks = list(
            loaded.predict_stream({"prompt": "大阪の観光名所"}, params={"max_tokens": 6, "temperature": 0.0})
        )
        *texts, final = chunks
        assert all(c["content"] for c in texts)
        assert final["content"] == "" and final["finish_reason"] == "length"
        assert final["usage"]["completion_tokens"] == 6
    finally:
        llm.close()
