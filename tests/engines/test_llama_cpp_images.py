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
