"""The project's tiny random-weight vision model (scripts/make_vision_model.py): a Hugging Face
SmolVLM directory, its text model's GGUF (which llmflow loads and runs, text only for now) and its
mmproj GGUF, converted by llama.cpp's own converter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmflow import LLM

ROOT = Path(__file__).resolve().parents[2]
#: the converter's imports (torch, transformers) are most of the time
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def made(vision_model) -> tuple[Path, dict]:
    return vision_model


def _metadata(path: Path) -> dict:
    from gguf import GGUFReader

    return {f.name: f.contents() for f in GGUFReader(str(path)).fields.values() if "tokenizer" not in f.name}


def test_the_files_a_vision_model_comes_as(made):
    out, summary = made
    assert summary["image_tokens"] == 4
    config = json.loads((out / "hf" / "config.json").read_text())
    assert config["architectures"] == ["SmolVLMForConditionalGeneration"]
    projector = _metadata(out / "mmproj-vision-f16.gguf")
    assert projector["clip.projector_type"] == "idefics3"
    assert projector["clip.vision.image_size"] == 64 and projector["clip.vision.patch_size"] == 16
    assert _metadata(out / "vision-f16.gguf")["general.architecture"] == "llama"


def test_its_text_model_runs_and_says_it_reads_text(made):
    out, _ = made
    llm = LLM.load(str(out / "vision-f16.gguf"), engine="llama_cpp")
    try:
        assert llm.engine.input_modalities == ("text",)
        assert llm.generate("Hi", {"max_tokens": 3, "temperature": 0}).usage.completion_tokens >= 1
    finally:
        llm.close()
