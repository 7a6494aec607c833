"""Engine registry. Engine modules are imported only when an engine is loaded, so that
`import llmflow` never pulls in llama.cpp, torch or a GPU runtime."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from llmflow.engines.base import Engine
from llmflow.errors import UnknownEngine

DEFAULT_ENGINE = "llama_cpp"

_ENGINES: dict[str, str] = {
    "llama_cpp": "llmflow.engines.llama_cpp:LlamaCppEngine",
    "llama_cpp_batched": "llmflow.engines.llama_cpp_batched:LlamaCppBatchedEngine",
    "exllamav2": "llmflow.engines.exllamav2:ExLlamaV2Engine",
    "transformers": "llmflow.engines.hf:TransformersEngine",
}


def register_engine(name: str, target: str) -> None:
    """Make an engine loadable by name; `target` is "module:Class", imported lazily."""
    _ENGINES[name] = target


def engine_names() -> list[str]:
    return sorted(_ENGINES)


def engine_class(name: str) -> type[Engine]:
    target = _ENGINES.get(name)
    if target is None:
        raise UnknownEngine(name, engine_names())
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def load_engine(name: str, model_path: Path, options: dict[str, Any] | None = None) -> Engine:
    """Load `model_path` with the engine called `name`; options are validated by the engine."""
    return engine_class(name).load(model_path, **(options or {}))


#: the engine that batches concurrent generations, for engines that run one at a time
_BATCHING: dict[str, str] = {"llama_cpp": "llama_cpp_batched"}


def guess_engine(model_path: Path, *, concurrent: bool = False) -> str:
    """The engine for a model file or directory, from what it looks like. `concurrent`: the
    caller runs generations from several threads at once (a server), so prefer an engine that
    batches them."""
    name = _guess(model_path)
    return batching_engine(name) if concurrent else name


def batching_engine(name: str) -> str:
    """The engine that batches concurrent generations of the models `name` loads (`name` itself
    when there is none)."""
    return _BATCHING.get(name, name)


def _guess(model_path: Path) -> str:
    if model_path.suffix == ".gguf":
        return "llama_cpp"
    if _is_exl2_dir(model_path):
        return "exllamav2"
    if model_path.is_dir() and (model_path / "config.json").is_file():
        return "transformers"  # any other Hugging Face model directory
    return DEFAULT_ENGINE


def _is_exl2_dir(model_path: Path) -> bool:
    """An EXL2-quantised directory: config.json's quantization_config says quant_method "exl2"."""
    import json

    try:
        config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    return isinstance(quant, dict) and quant.get("quant_method") == "exl2"


__all__ = [
    "DEFAULT_ENGINE",
    "Engine",
    "batching_engine",
    "engine_class",
    "engine_names",
    "guess_engine",
    "load_engine",
    "register_engine",
]
