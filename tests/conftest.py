"""Fixtures shared across the suite."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedded_llm():
    """The embedded SmolLM2 model, loaded once for the whole session."""
    from llmflow import LLM

    llm = LLM.load()
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def default_served():
    """What `llmflow serve` serves for the embedded model: the batching engine, default options."""
    from llmflow.server import load_served

    served = load_served(None)
    assert served.engine_name == "llama_cpp_batched"
    yield served
    served.llm.close()


@pytest.fixture(scope="session")
def lora_adapters(tmp_path_factory):
    """LoRA adapters made by the project's own script (random weights through llama.cpp's
    converter): two of the embedded model's shape (seeds 1 and 2) and one of another shape,
    made once for the session (each converter run is mostly its imports, so they run together)."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "make_lora.py"
    where = tmp_path_factory.mktemp("lora")
    made = {"a": ("--seed", "1"), "b": ("--seed", "2"), "wrong": ("--mismatch",)}

    def make(name: str) -> Path:
        out = where / f"{name}.gguf"
        command = [sys.executable, str(script), str(out), *made[name]]
        subprocess.run(command, check=True, capture_output=True, timeout=900)
        return out

    with ThreadPoolExecutor(len(made)) as pool:
        return dict(zip(made, pool.map(make, made), strict=True))


@pytest.fixture(scope="session")
def vision_model(tmp_path_factory):
    """The project's tiny random-weight vision model (scripts/make_vision_model.py), made once for
    the session: `(folder, summary)`, the folder holding `hf/` (a SmolVLM directory for the
    transformers engine), `vision-f16.gguf` and `mmproj-vision-f16.gguf` (llama.cpp's pair);
    `summary["image_tokens"]`: the positions one image takes in the text model."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tests.extras import need

    need("torch", "transformers")
    need("transformers", "transformers")
    out = tmp_path_factory.mktemp("vision")
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_vision_model.py"
    done = subprocess.run(
        [sys.executable, str(script), str(out)], check=True, capture_output=True, text=True, timeout=900
    )
    return out, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vision_saved(vision_model, tmp_path_factory):
    """The tiny vision model saved as an MLflow model (by reference, with its projector), and
    the positions one image chunk takes: `(path, image_tokens)`."""
    import llmflow.mlflow
    from tests.media.images import need_mtmd, vision_load_options

    need_mtmd()
    folder, summary = vision_model
    saved = tmp_path_factory.mktemp("vision-saved") / "model"
    model, options = vision_load_options(folder)
    llmflow.mlflow.save_model(saved, model, by_reference=True, **options)
    return saved, summary["image_tokens"]
