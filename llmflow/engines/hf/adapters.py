"""LoRA adapters on a transformers model: PEFT adapter directories (`adapter_config.json` and
`adapter_model.safetensors`, as `save_pretrained` writes them), loaded by name with the `peft`
library (`PeftModel`) and applied to the model for a generation.

PEFT puts its LoRA layers into the model itself, so the engine's decode loop runs the same model
object whatever adapter computes: its LoRA layers hold every loaded adapter, one of them active
(`set_adapter`, its weight set per layer with `set_scale`) or all of them off
(`disable_adapter_layers`: the base model's own numbers). The engine decodes one generation at a
time (`LLM.exclusive`); a generation counts itself running from its first token to its end
(`using`), and loading or unloading waits until none runs, so an adapter never changes under a
running generation. No lock is held across a generation's tokens: one closed from another thread
(or by the garbage collector) still counts itself out. An adapter of another model's shape is
refused when it loads (`AdapterLoadFailed`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llmflow.engines.lora import AdapterKey
from llmflow.errors import AdapterLoadFailed, EngineUnavailable, UnknownAdapter

INSTALL_HINT = "pip install 'llmflow[transformers]'"


class PeftAdapters:
    """The PEFT adapters loaded on one transformers model, by name."""

    def __init__(self, model: Any):
        self._model = model
        #: the PEFT wrapper around the model, made by the first load
        self._peft: Any = None
        self._loaded: dict[str, Path] = {}
        self._applied: AdapterKey = None
        #: guards the adapters and `_running`, the generations computing now
        self._state = threading.Condition()
        self._running = 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._loaded)

    def check(self, name: str) -> None:
        if name not in self._loaded:
            raise UnknownAdapter(name, list(self._loaded))

    def load(self, name: str, path: str | Path) -> None:
        """Load the PEFT adapter directory at `path` as `name` (replacing one of that name)."""
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise AdapterLoadFailed(name, str(path), "no PEFT adapter directory (with adapter_config.json)")
        with self._state:
            self._state.wait_for(lambda: self._running == 0)
            if name in self._loaded:
                self._delete(name)
            self._applied = _UNKNOWN  # a load activates the new adapter: set the next one again
            try:
                self._inject(name, path)
            except (ValueError, RuntimeError, OSError, KeyError) as exc:  # another shape, a bad file
                self._forget(name)
                raise AdapterLoadFailed(name, str(path), _first_line(exc)) from None
            self._loaded[name] = path

    def unload(self, name: str) -> None:
        with self._state:
            self.check(name)
            self._state.wait_for(lambda: self._running == 0)
            self._delete(name)
            self._applied = _UNKNOWN

    @contextmanager
    def using(self, key: AdapterKey) -> Iterator[None]:
        """The model computes with `key`'s adapter (None: the base model) until the block ends;
        no adapter is loaded or unloaded meanwhile."""
        with self._state:
            if key is not None:
                self.check(key[0])
            if key != self._applied:
                self._apply(key)
            self._running += 1
        try:
            yield
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def _inject(self, name: str, path: Path) -> None:
        if self._peft is None:
            PeftModel = _peft_model_class()
            self._peft = PeftModel.from_pretrained(self._model, str(path), adapter_name=name)
        else:
            self._peft.load_adapter(str(path), adapter_name=name)
        self._model.eval()

    def _apply(self, key: AdapterKey) -> None:
        if self._peft is None:  # nothing was ever loaded: the model is the base model
            self._applied = None
            return
        tuner = self._peft.base_model
        if key is None:
            tuner.disable_adapter_layers()
        else:
            name, scale = key
            tuner.enable_adapter_layers()
            tuner.set_adapter(name)
            for layer in _lora_layers(self._model):
                layer.set_scale(name, scale)
        self._applied = key

    def _delete(self, name: str) -> None:
        self._peft.delete_adapter(name)
        del self._loaded[name]

    def _forget(self, name: str) -> None:
        """Drop what a failed load may have left of `name` in the model."""
        if self._peft is None:
            return
        with contextlib.suppress(Exception):  # nothing of it was added
            self._peft.delete_adapter(name)


#: `_applied` after a load or unload: whatever the model holds now is set again by the next `using`
_UNKNOWN: Any = ("", -1.0)


def _lora_layers(model: Any) -> Iterator[Any]:
    from peft.tuners.lora import LoraLayer

    return (module for module in model.modules() if isinstance(module, LoraLayer))


def _peft_model_class() -> Any:
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise EngineUnavailable(f"PEFT adapters need the peft library ({INSTALL_HINT}): {exc}") from None
    return PeftModel


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
