"""LoRA adapters on a llama.cpp model: loaded by name (GGUF adapter files, as llama.cpp's
`convert_lora_to_gguf.py` writes them), applied to a context for a generation.

llama.cpp applies adapters per context (`llama_set_adapters_lora`), to every sequence it decodes:
an engine applies the adapter a generation asks for (`SamplingParams.lora`, `lora_scale`) before
its tokens are computed, and never reuses KV state computed under another adapter. An adapter of
another model's shape is refused by llama.cpp when it loads (`AdapterLoadFailed`).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from llmflow.errors import AdapterLoadFailed, UnknownAdapter

EngineT = TypeVar("EngineT")

#: what a generation computes with: (adapter name, scale), or None for the base model
AdapterKey = tuple[str, float] | None


def with_adapters(engine: EngineT, adapters: Mapping[str, str]) -> EngineT:
    """`engine` with the adapters its load options name (NAME -> GGUF file) loaded; closed when
    one of them cannot be."""
    try:
        for name, path in adapters.items():
            engine.load_adapter(name, path)  # type: ignore[attr-defined]
    except BaseException:
        engine.close()
        raise
    return engine


def adapter_key(name: str | None, scale: float) -> AdapterKey:
    """The adapter a generation asks for; scale 0 or no name is the base model itself."""
    return None if name is None or scale == 0.0 else (name, scale)


class LlamaAdapters:
    """The adapters loaded on one llama.cpp model, by name. Loading and unloading may happen
    while generations run elsewhere (`unload` of one in use waits for nothing: llama.cpp frees
    it with the model, and the name is gone for new requests)."""

    def __init__(self, llama_cpp: Any, model: Any):
        self._llama_cpp = llama_cpp
        self._model = model
        self._loaded: dict[str, tuple[Any, Path]] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._loaded)

    def paths(self) -> dict[str, Path]:
        return {name: path for name, (_, path) in self._loaded.items()}

    def load(self, name: str, path: str | Path) -> None:
        """Load the GGUF adapter at `path` as `name` (replacing one of that name)."""
        path = Path(path)
        if not path.is_file():
            raise AdapterLoadFailed(name, str(path), "no such file")
        adapter = self._llama_cpp.llama_adapter_lora_init(self._model, str(path).encode())
        if not adapter:
            raise AdapterLoadFailed(
                name,
                str(path),
                "llama.cpp refused it (not a LoRA adapter of this model's shape; see its log)",
            )
        with self._lock:
            self._loaded[name] = (adapter, path)

    def unload(self, name: str) -> None:
        with self._lock:
            if name not in self._loaded:
                raise UnknownAdapter(name, list(self._loaded))
            del self._loaded[name]  # freed with the model: a running generation may still use it

    def check(self, name: str) -> None:
        if name not in self._loaded:
            raise UnknownAdapter(name, list(self._loaded))

    def apply(self, context: Any, key: AdapterKey) -> None:
        """Make `context` compute with `key`'s adapter (None: none)."""
        llama_cpp = self._llama_cpp
        if key is None:
            result = llama_cpp.llama_set_adapters_lora(context, None, 0, None)
        else:
            with self._lock:
                found = self._loaded.get(key[0])
            if found is None:
                raise UnknownAdapter(key[0], list(self._loaded))
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(found[0])
            scales = (ctypes.c_float * 1)(key[1])
            result = llama_cpp.llama_set_adapters_lora(context, adapters, 1, scales)
        if result != 0:
            raise RuntimeError(f"llama.cpp could not set the adapter {key!r} ({result})")
