"""`llmflow log hf://...` into a real MLflow tracking store: the weights copied in, and the
model's metadata naming the repo, revision, commit and each file's checksum."""

from __future__ import annotations

from pathlib import Path

import mlflow
from mlflow.models import Model
from typer.testing import CliRunner

from llmflow.cli import app
from tests.hub.conftest import GGUF_FILE, GGUF_REPO, SPLIT_REPO
from tests.mlflow.store import Store


def log(store: Store, reference: str, *args: str) -> str:
    command = ["log", reference, "--tracking-uri", store.uri, "--experiment", "tests", *args]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_a_registered_hub_model_names_its_upstream_weights(hub, content, tmp_path):
    store = Store.create(tmp_path / "mlflow")
    uri = log(store, f"hf://{GGUF_REPO}:Q4_1@v1", "--registered-model-name", "smol-hub")
    assert uri == "models:/smol-hub/1"
    mlflow.set_tracking_uri(store.uri)
    try:
        local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "downloaded"))
    finally:
        mlflow.set_tracking_uri(None)
    meta = Model.load(local)
    assert meta.metadata["hf_hub"] == {
        "reference": f"hf://{GGUF_REPO}:Q4_1@v1",
        "repo": GGUF_REPO,
        "revision": "v1",
        "commit": hub.repos[GGUF_REPO].refs["v1"],
        "files": [{"path": GGUF_FILE, "size": content.gguf.size, "sha256": content.gguf.sha256}],
    }
    assert (Path(local) / "artifacts" / GGUF_FILE).stat().st_size == content.gguf.size


def test_a_split_model_is_logged_with_every_part(hub, content, tmp_path):
    store = Store.create(tmp_path / "mlflow")
    uri = log(store, f"hf://{SPLIT_REPO}")
    mlflow.set_tracking_uri(store.uri)
    try:
        local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "downloaded")))
    finally:
        mlflow.set_tracking_uri(None)
    assert sorted(p.name for p in (local / "artifacts").iterdir()) == sorted(content.split)
    files = Model.load(str(local)).metadata["hf_hub"]["files"]
    assert [(f["path"], f["sha256"]) for f in files] == [
        (n, content.split[n].sha256) for n in sorted(content.split)
    ]


def test_a_safetensors_repo_is_logged_as_its_chosen_files_under_its_name(hub, content, tmp_path):
    from tests.hub.conftest import TINY_REPO

    store = Store.create(tmp_path / "mlflow")
    uri = log(store, f"hf://{TINY_REPO}")
    mlflow.set_tracking_uri(store.uri)
    try:
        local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "downloaded")))
    finally:
        mlflow.set_tracking_uri(None)
    chosen = sorted(n for n in content.tiny if n.endswith((".json", ".safetensors", ".jinja")))
    assert sorted(p.name for p in (local / "artifacts" / "tiny-llama").iterdir()) == chosen
    meta = Model.load(str(local))
    assert meta.flavors["python_function"]["config"]["engine"] == "transformers"
    assert [f["path"] for f in meta.metadata["hf_hub"]["files"]] == chosen
