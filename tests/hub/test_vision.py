"""A Hub vision model reads images as it comes: its `mmproj` file, fetched with the GGUF, is the
engine's projector, and a model logged from the reference carries it along."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmflow import LLM
from tests.hub.fake_hub import FakeHub, HubFile, HubRepo
from tests.media.images import assert_loads_reading_images, need_mtmd

VISION_REPO = "llmflow-test/tiny-vision-GGUF"


@pytest.fixture
def vision_hub(vision_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    need_mtmd()
    folder, _ = vision_model
    repo = HubRepo()
    files = {
        name: HubFile((folder / name).read_bytes()) for name in ("vision-f16.gguf", "mmproj-vision-f16.gguf")
    }
    repo.add_commit("vision", files, "main")
    with FakeHub({VISION_REPO: repo}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def test_a_hub_vision_model_reads_images_through_its_fetched_projector(vision_hub):
    llm = LLM.load(f"hf://{VISION_REPO}", engine="llama_cpp", engine_options={"n_ctx": 512})
    try:
        assert llm.engine.input_modalities == ("text", "image")
    finally:
        llm.close()


def test_an_engine_option_still_chooses_the_projector(vision_hub, tmp_path):
    from llmflow.errors import InvalidParams

    with pytest.raises(InvalidParams) as error:
        LLM.load(
            f"hf://{VISION_REPO}", engine="llama_cpp", engine_options={"mmproj": str(tmp_path / "no.gguf")}
        )
    assert error.value.problems[0].field == "mmproj"


def test_a_model_logged_from_the_reference_carries_the_projector(vision_hub, tmp_path):
    import llmflow.mlflow

    saved = tmp_path / "saved"
    llmflow.mlflow.save_model(saved, f"hf://{VISION_REPO}", engine="llama_cpp", engine_options={"n_ctx": 512})
    assert sorted(p.name for p in (saved / "artifacts").iterdir()) == ["projector", "vision-f16.gguf"]
    assert_loads_reading_images(saved)
