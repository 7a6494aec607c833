"""What a loaded model holds in memory, estimated from its shapes: the weights as loaded and the
KV cache at the size the engine allocated. A server's `--max-memory` counts models by it.

An estimate, not a measurement of the process: it is known as soon as the engine has its
context (nothing to wait for, nothing to sample), it is the same on a CPU and a GPU, and it is
the model's alone, where the process's memory also moves with other models loading at the same
time and with weights that llama.cpp maps from the file and reads in only as they are used.
"""

from __future__ import annotations

from typing import Any

#: bytes per element of each llama.cpp KV cache type (q8_0: 32 values and an f16 scale in 34 bytes)
KV_ELEMENT_BYTES = {"f16": 2.0, "q8_0": 34 / 32}


def llama_kv_bytes_per_token(llama_cpp: Any, model: Any, kv_cache_type: str) -> int:
    """K and V for every layer of a llama.cpp model (`llama_model *`); some models shape their
    heads otherwise, so an estimate."""
    head_dim = llama_cpp.llama_model_n_embd(model) // max(1, llama_cpp.llama_model_n_head(model))
    elements = 2 * llama_cpp.llama_model_n_layer(model) * llama_cpp.llama_model_n_head_kv(model) * head_dim
    return int(elements * KV_ELEMENT_BYTES[kv_cache_type])


def llama_cpp_bytes(llama_cpp: Any, model: Any, kv_tokens: int, kv_cache_type: str) -> int:
    """A llama.cpp model's tensors and a KV cache of `kv_tokens` (every sequence's together)."""
    weights = int(llama_cpp.llama_model_size(model))
    return weights + kv_tokens * llama_kv_bytes_per_token(llama_cpp, model, kv_cache_type)


def torch_bytes(model: Any, kv_tokens: int) -> int:
    """A transformers model's parameters and buffers, and a KV cache of `kv_tokens` in its dtype."""
    tensors = [*model.parameters(), *model.buffers()]
    weights = sum(t.numel() * t.element_size() for t in tensors)
    config = model.config.get_text_config()
    heads = getattr(config, "num_attention_heads", 1) or 1
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = next(iter(model.parameters())).element_size()
    per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * element
    return int(weights + kv_tokens * per_token)
