"""Model files built for tests and benchmarks: random weights, real tokenizers."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

#: a directory with the embedded model's tokenizer files in Hugging Face format, for machines
#: that cannot convert the GGUF (no `gguf` package or no embedded model there)
TOKENIZER_DIR_ENV = "LLMFLOW_TEST_TOKENIZER_DIR"


class Unavailable(Exception):
    """The files cannot be built here; the message says what is missing."""


def _scratch(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@cache
def smollm2_tokenizer_dir() -> Path:
    """The embedded SmolLM2's tokenizer as tokenizer.json & co, converted from its GGUF once."""
    given = os.environ.get(TOKENIZER_DIR_ENV)
    if given:
        return Path(given)
    for module in ("transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            raise Unavailable(f"converting the GGUF tokenizer needs {module} (or set {TOKENIZER_DIR_ENV})")
    from transformers import AutoTokenizer

    from llmflow.errors import ModelNotFound
    from llmflow.model_files import default_model_path

    try:
        gguf = default_model_path()
    except ModelNotFound as exc:
        raise Unavailable(str(exc)) from None
    out = _scratch("llmflow-smollm2-tokenizer-")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    return out


@cache
def tiny_llama_dir() -> Path:
    """A 63M-parameter random Llama with the SmolLM2 tokenizer (126 MB, built on the CPU)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("safetensors") is None:
        raise Unavailable("building the random test model needs torch and safetensors")
    from tests.models.random_llama import SHAPES, write_random_llama

    return write_random_llama(_scratch("llmflow-tiny-llama-"), SHAPES["tiny"], smollm2_tokenizer_dir())
