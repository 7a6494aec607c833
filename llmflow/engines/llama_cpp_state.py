"""A llama.cpp sequence's KV state as bytes and back (`llama_state_seq_get_data` /
`llama_state_seq_set_data`): what the prompt cache keeps of a conversation that leaves its
sequence. Shared by both llama.cpp engines."""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmflow.engines.prompt_cache import PromptCache, State

if TYPE_CHECKING:
    from llmflow.engines.llama_cpp import LlamaCppOptions


def save_sequence(lib: Any, ctx: Any, seq: int) -> bytearray | None:
    """Sequence `seq`'s state (its KV cells and their positions), or None when llama.cpp gives
    nothing. llama.cpp writes straight into the returned buffer: a state is tens to hundreds of
    megabytes, and each further copy, or a buffer zeroed before it is written, costs as much as
    the write itself (on a virtual machine, page faults make that tens of milliseconds a copy)."""
    size = lib.llama_state_seq_get_size(ctx, seq)
    if size <= 0:
        return None
    state = bytearray(size)  # zero pages the kernel maps on first write: written once
    written = lib.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(state), size, seq)
    if written <= 0:
        return None
    del state[written:]
    return state


def restore_sequence(lib: Any, ctx: Any, seq: int, state: State) -> bool:
    """Put `state` into sequence `seq`, whose cells are dropped first; False when llama.cpp
    refuses it (then `seq` is empty). Read in place, never copied."""
    lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), seq, -1, -1)
    if isinstance(state, bytearray):
        source: Any = (ctypes.c_uint8 * len(state)).from_buffer(state)
    else:
        source = ctypes.cast(ctypes.c_char_p(state), ctypes.POINTER(ctypes.c_uint8))
    if lib.llama_state_seq_set_data(ctx, source, len(state), seq) == 0:
        lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), seq, -1, -1)
        return False
    return True


def state_fingerprint(lib: Any, engine: str, model_path: Path, kv_cache_type: str, flash_attn: bool) -> str:
    """What a saved state depends on: the weights, llama.cpp's version and the cache's layout. A
    disk cache file made under another fingerprint is never loaded."""
    size = model_path.stat().st_size
    with open(model_path, "rb") as f:  # the header and first tensors: which weights these are
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]
    version = getattr(lib, "__version__", "?")
    return f"{engine}|{head}|{size}|llama-cpp-python {version}|{kv_cache_type}|fa={flash_attn}"


def prompt_cache_for(lib: Any, engine: str, model_path: Path, options: LlamaCppOptions) -> PromptCache | None:
    """The prompt cache the options ask for (None with `prompt_cache` off or both tiers off)."""
    ram = options.prompt_cache_ram_mib << 20
    disk_dir = Path(options.prompt_cache_dir).expanduser() if options.prompt_cache_dir else None
    disk = options.prompt_cache_disk_mib << 20 if disk_dir is not None else 0
    if not options.prompt_cache or (ram == 0 and disk == 0):
        return None
    fingerprint = state_fingerprint(lib, engine, model_path, options.kv_cache_type, options.flash_attn)
    return PromptCache(host_bytes=ram, fingerprint=fingerprint, disk_dir=disk_dir, disk_bytes=disk)
