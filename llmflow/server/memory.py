"""The memory budget of a server that serves several models (`--max-memory`): reading a size,
and what each model counts for against it.

A loaded model counts as its engine's estimate (`Engine.memory_bytes`: the weights as loaded
and the KV cache as allocated, from the model's shapes and the context the engine made; see
`engines/memory.py` for why an estimate rather than the process's measured growth). The
estimate is remembered when the model is unloaded, so its next load makes room for exactly that;
before its first load, a model counts as its weights' size on disk (the engine sizes the KV cache
only at load, and the registry makes room again once it knows).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from llmflow.errors import ModelTooLarge

if TYPE_CHECKING:
    from llmflow.server.model_config import ModelConfig
    from llmflow.server.served import ServedModel

#: size units: SI ones are powers of 1000, IEC ones (and a bare K, M, G, T, as in `docker
#: --memory`) powers of 1024; case does not matter
_UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", 1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", 1)},
    **{p: 1024**i for i, p in enumerate("kmgt", 1)},
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size such as `8GiB`, `512MiB`, `16GB`, `1.5G` or `1000000`; a `ValueError`
    that says what is accepted otherwise."""
    match = _SIZE.fullmatch(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(
            f"{text!r} is not a size: give a number of bytes with an optional unit, e.g. 8GiB, "
            "512MiB or 16GB (GB = 10^9 bytes; GiB and G = 2^30)"
        )
    size = int(float(match.group(1)) * unit)
    if size <= 0:
        raise ValueError(f"{text!r}: must be more than 0 bytes")
    return size


def format_size(size: int) -> str:
    """`size` bytes for people: in GiB from 1 GiB up, else MiB."""
    if size >= 1 << 30:
        return f"{size / (1 << 30):.2f} GiB"
    return f"{size / (1 << 20):.1f} MiB"


def loaded_bytes(served: ServedModel) -> int | None:
    """A loaded model's engine estimate; None for a model without one (a third-party pyfunc
    model, an engine that cannot tell)."""
    if served.llm is None:
        return None
    return served.llm.engine.memory_bytes()


def weights_on_disk(config: ModelConfig) -> int:
    """What a model counts for before its first load: its weights file, or the files of its model
    directory; 0 for a logged model (`models:/`, `runs:/`), which is not downloaded yet."""
    path = config.local_path()
    if path is None:
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file())


def too_large(name: str, size: int, budget: int) -> ModelTooLarge:
    return ModelTooLarge(
        f"the model {name!r} needs about {format_size(size)} (weights and KV cache), more than the "
        f"server's memory budget (--max-memory) of {format_size(budget)}: it cannot be loaded; "
        "raise the budget or give it a smaller n_ctx or parallel"
    )
