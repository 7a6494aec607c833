"""The llama.cpp engines' image option (`mmproj`): what is refused, and how, before any image is
read. Images through a projector need llama.cpp's multimodal library in the build."""

from __future__ import annotations

import pytest

from llmflow import LLM
from llmflow.errors import InvalidParams
from llmflow.model_files import default_model_path


def test_a_missing_projector_file_is_an_error_naming_the_option(tmp_path):
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp", engine_options={"n_ctx": 256, "mmproj": str(tmp_path / "nowhere.gguf")})
    assert error.value.problems[0].field == "mmproj"


def test_a_file_that_is_no_projector_is_an_error_naming_the_option():
    """The text model given as its own projector: refused by llama.cpp's loader, or by a build
    without the multimodal library; either way the option is named and nothing is left loaded."""
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp", engine_options={"n_ctx": 256, "mmproj": str(default_model_path())})
    assert error.value.problems[0].field == "mmproj"


def test_the_batching_engine_refuses_a_projector():
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp_batched", engine_options={"mmproj": str(default_model_path())})
    assert error.value.problems[0].field == "mmproj"


def test_an_image_reaches_the_model_and_a_resent_one_is_not_encoded_again(vision_model):
    """The tiny vision model and its projector: an image takes positions of the prompt (its
    chunks and the markup the projector writes around them), and the same image in another
    conversation comes from the encoded-image cache."""
    from tests.media.images import data_uri, image_bytes

    try:
        import llama_cpp.mtmd_cpp  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        pytest.skip("this llama.cpp build has no multimodal library (LLAVA_BUILD=ON)")
    folder, summary = vision_model
    options = {"n_ctx": 512, "mmproj": str(folder / "mmproj-vision-f16.gguf")}
    llm = LLM.load(str(folder / "vision-f16.gguf"), engine="llama_cpp", engine_options=options)

    def ask(text: str, image: bytes | None):
        parts: list[dict] = [{"type": "text", "text": text}]
        if image is not None:
            parts.append({"type": "image_url", "image_url": {"url": data_uri(image)}})
        return llm.generate([{"role": "user", "content": parts}], {"max_tokens": 2, "temperature": 0})

    try:
        assert llm.engine.input_modalities == ("text", "image")
        image = image_bytes(size=(64, 64))
        plain, seen = ask("What is this?", None), ask("What is this?", image)
        assert seen.usage.prompt_tokens - plain.usage.prompt_tokens >= summary["image_tokens"]
        encoded = llm.engine._projector.encoded
        misses = encoded.misses
        assert misses >= 1 and encoded.hits == 0
        ask("Name it.", image)
        assert encoded.hits == misses and encoded.misses == misses
    finally:
        llm.close()
