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
    return engine_class(name).load(model_path, **(options or {}))  # type: ignore[attr-defined]


def guess_engine(model_path: Path) -> str:
    """The engine for a model file or directory, from what it looks like."""
    if model_path.suffix == ".gguf":
        return "llama_cpp"
    return DEFAULT_ENGINE


__all__ = [
    "DEFAULT_ENGINE",
    "Engine",
    "engine_class",
    "engine_names",
    "guess_engine",
    "load_engine",
    "register_engine",
]
