"""Embeddings from a GGUF model: a llama.cpp context of its own in embedding mode.

An embedding context (`embeddings=True`, a pooling type) is a different llama.cpp context from
the one that generates, so it is made on the same loaded weights the first time someone asks for
embeddings, and the generation context (the batching engine's KV pool included) is never touched.
How token states are pooled comes from the model's GGUF metadata (`<arch>.pooling_type`: an
embedding model such as bge or nomic-embed has one); the engine option `pooling` overrides it, and
a model with neither (a chat model) cannot embed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmflow.engines.openmp import release_thread_team
from llmflow.errors import EngineFailed, InvalidRequest

#: sequences one embedding pass may hold (inputs are packed into passes up to the window)
EMBED_SEQUENCES = 16
#: llmflow's pooling option -> llama.cpp's enum name
POOLING = {
    "mean": "LLAMA_POOLING_TYPE_MEAN",
    "cls": "LLAMA_POOLING_TYPE_CLS",
    "last": "LLAMA_POOLING_TYPE_LAST",
}


class LlamaEmbedder:
    """One embedding context on a loaded model. Not thread-safe: `LazyEmbedder` serialises."""

    def __init__(self, llama_cpp: Any, model: Any, *, n_ctx: int, n_threads: int, pooling: str | None):
        """`model` is a `llama_cpp._internals.LlamaModel`; `n_ctx` the most tokens one input
        may have (and one pass holds)."""
        lib = llama_cpp
        self._lib = lib
        params = lib.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = (
            getattr(lib, POOLING[pooling]) if pooling else lib.LLAMA_POOLING_TYPE_UNSPECIFIED
        )
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_seq_max = EMBED_SEQUENCES
        params.kv_unified = True  # the window is shared by the inputs of one pass
        params.n_threads = params.n_threads_batch = n_threads
        ctx = lib.llama_init_from_model(model.model, params)
        if ctx is None:
            raise EngineFailed(f"llama.cpp could not create an embedding context of {n_ctx} tokens")
        self._ctx = ctx
        self.window = n_ctx
        self.pooling = lib.llama_pooling_type(ctx)
        self.n_embd = lib.llama_model_n_embd(model.model)
        self._batch = lib.llama_batch_init(n_ctx, 0, 1)

    @property
    def can_pool(self) -> bool:
        lib = self._lib
        return self.pooling not in (lib.LLAMA_POOLING_TYPE_NONE, lib.LLAMA_POOLING_TYPE_RANK)

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """One pooled vector per input, in order; as few passes as the window allows."""
        vectors: list[list[float]] = []
        group: list[Sequence[int]] = []
        used = 0
        for tokens in inputs:
            if group and (used + len(tokens) > self.window or len(group) == EMBED_SEQUENCES):
                vectors += self._pass(group)
                group, used = [], 0
            group.append(tokens)
            used += len(tokens)
        if group:
            vectors += self._pass(group)
        return vectors

    def _pass(self, group: Sequence[Sequence[int]]) -> list[list[float]]:
        lib, batch = self._lib, self._batch
        memory = lib.llama_get_memory(self._ctx)
        if memory:
            lib.llama_memory_clear(memory, True)
        i = 0
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.logits[i] = token, pos, 1
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                i += 1
        batch.n_tokens = i
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise EngineFailed(f"llama_decode failed with status {status} on {len(group)} embedding inputs")
        out = []
        for seq in range(len(group)):
            row = lib.llama_get_embeddings_seq(self._ctx, seq)
            out.append(np.ctypeslib.as_array(row, shape=(self.n_embd,)).tolist())
        return out

    def close(self) -> None:
        if self._ctx is not None:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None


class LazyEmbedder:
    """Makes the embedding context at the first call (most servers never embed), then runs one
    call at a time on it. A model that cannot pool is told once and answered so after."""

    def __init__(self, make: Callable[[], LlamaEmbedder]):
        self._make = make
        self._lock = threading.Lock()
        self._embedder: LlamaEmbedder | None = None
        self._refusal: InvalidRequest | None = None

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        with self._lock:
            embedder = self._ready()
            for i, tokens in enumerate(inputs):
                if len(tokens) > embedder.window:
                    raise InvalidRequest.single(
                        f"input[{i}]",
                        f"has {len(tokens)} tokens, more than the embedding window of {embedder.window}",
                    )
            try:
                return embedder.embed(inputs)
            finally:
                release_thread_team()  # see `llmflow.engines.openmp`: callers' threads vary

    def _ready(self) -> LlamaEmbedder:
        if self._refusal is not None:
            raise InvalidRequest(self._refusal.problems)
        if self._embedder is None:
            embedder = self._make()
            if not embedder.can_pool:
                embedder.close()
                self._refusal = InvalidRequest.single(
                    "model",
                    "this model cannot make embeddings: its GGUF names no pooling type (a chat "
                    "model); serve an embedding model, or load this one with the engine option "
                    "pooling=mean (or cls, last)",
                )
                raise InvalidRequest(self._refusal.problems)
            self._embedder = embedder
        return self._embedder

    def close(self) -> None:
        with self._lock:
            if self._embedder is not None:
                self._embedder.close()
                self._embedder = None


def lazy_embedder(model: Any, options: Any, n_ctx: int) -> LazyEmbedder:
    """The embedder of a llama.cpp engine: `model` a loaded `LlamaModel`, `options` its
    `LlamaCppOptions` (threads, pooling), `n_ctx` a generation's window (the embedding window is
    no larger, nor larger than the model was trained for)."""

    def make() -> LlamaEmbedder:
        import llama_cpp

        window = min(n_ctx, model.n_ctx_train())
        return LlamaEmbedder(
            llama_cpp, model, n_ctx=window, n_threads=options.n_threads, pooling=options.pooling
        )

    return LazyEmbedder(make)
