"""llama.cpp with continuous batching: concurrent generations share one `llama_decode` per step.

Each generation runs in its own sequence of a shared llama.cpp context, with its own sampler
chain. The KV cache has one stream per sequence (`kv_unified=False`): attention then reads only
a sequence's own tokens, and a request's output does not depend on what runs beside it. The
scheduling itself is engine-independent (`llmflow.engines.scheduler`); this module is the
llama.cpp side: context, batch, samplers, sequence moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from llmflow.engines.base import Engine
from llmflow.engines.buffer_types import decide_extra_buffers
from llmflow.engines.llama_cpp import (
    LlamaCppOptions,
    LlamaVocab,
    VocabMethods,
    gguf_file,
    import_llama_cpp,
    usable_cores,
)
from llmflow.engines.openmp import release_thread_team
from llmflow.engines.scheduler import BatchEntry, BatchScheduler, SchedulerStats
from llmflow.errors import EngineFailed, InvalidParams, ModelNotFound
from llmflow.params import SamplingParams
from llmflow.types import CancelToken

#: the default number of sequences keeps their KV cache within about this many bytes
KV_BUDGET_BYTES = 1 << 30
#: ... and at most this many sequences per CPU core
MAX_SEQUENCES_PER_CORE = 4
#: what llama.cpp's Llama class uses for repetition penalties
PENALTY_LAST_N = 64
RANDOM_SEED = 0xFFFFFFFF


class LlamaCppBatchedOptions(LlamaCppOptions):
    """Load-time options. `n_ctx` is each generation's context window; the KV cache holds
    `parallel` of them."""

    parallel: int | None = Field(
        None, ge=1, description="generations decoded together; default: from n_ctx, the model and the cores"
    )
    prefill_chunk: int = Field(
        32,
        ge=1,
        description="prompt tokens per step while other generations stream: smaller keeps their "
        "tokens flowing, larger gives a new request its first token sooner",
    )

    @field_validator("prefill_chunk")
    @classmethod
    def _chunk_fits_a_batch(cls, value: int, info: ValidationInfo) -> int:
        n_batch = info.data.get("n_batch")
        if n_batch is not None and value > n_batch:
            raise ValueError(f"must be at most n_batch ({n_batch})")
        return value


class LlamaCppBatchedEngine(VocabMethods, Engine):
    """A GGUF model that decodes up to `max_concurrency` generations in one batch per step.

    `generate` may be called from many threads at once; beyond `max_concurrency` a generation
    waits for a free sequence. `stats()` tells how many run and wait."""

    name: ClassVar[str] = "llama_cpp_batched"
    concurrent: ClassVar[bool] = True
    pip_packages: ClassVar[tuple[str, ...]] = ("llama-cpp-python",)
    thread_option: ClassVar[str | None] = "n_threads"

    def __init__(
        self, backend: LlamaStepBackend, vocab: LlamaVocab, model_path: Path, options: LlamaCppBatchedOptions
    ):
        self._backend = backend
        self._vocab = vocab
        self._model_path = model_path
        self.options = options
        self._scheduler = BatchScheduler(
            backend,
            parallel=backend.parallel,
            n_ctx=backend.n_ctx_seq,
            n_batch=backend.n_batch,
            prefill_chunk=options.prefill_chunk,
            eos_token_ids=vocab.eos_token_ids,
        )

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> LlamaCppBatchedEngine:
        parsed = LlamaCppBatchedOptions.parse(options)
        path = gguf_file(model_path)
        llama_cpp = import_llama_cpp(cls.name)
        # the decision is kept in the options, so that `engine.options` says what was loaded
        parsed = parsed.model_copy(
            update={"extra_buffers": decide_extra_buffers(llama_cpp, parsed.extra_buffers)}
        )
        model = _load_model(llama_cpp, path, parsed)
        try:
            vocab = LlamaVocab(model, model.metadata())
            backend = LlamaStepBackend.create(llama_cpp, model, parsed)
        except BaseException:
            model.close()
            raise
        return cls(backend, vocab, path, parsed)

    @property
    def model_name(self) -> str:
        return self._model_path.name.removesuffix(".gguf")

    @property
    def max_concurrency(self) -> int:
        return self._backend.parallel

    @property
    def n_ctx(self) -> int:
        """Each generation's context window."""
        return self._backend.n_ctx_seq

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[int]:
        if params.seed is None and self.options.seed is not None:
            params = params.model_copy(update={"seed": self.options.seed})
        return self._scheduler.generate(prompt_ids, params, cancel)

    def stats(self) -> SchedulerStats:
        return self._scheduler.stats()

    def close(self) -> None:
        self._scheduler.close()
        self._backend.close()


def default_parallel(n_ctx: int, kv_bytes_per_token: int, cores: int) -> int:
    """As many sequences as fit a KV cache of about `KV_BUDGET_BYTES`, at most
    `MAX_SEQUENCES_PER_CORE` per core: past that, a CPU gains no throughput from a wider batch and
    every stream slows down."""
    fit = KV_BUDGET_BYTES // max(1, n_ctx * kv_bytes_per_token)
    return max(1, min(MAX_SEQUENCES_PER_CORE * cores, fit))


def _load_model(llama_cpp: Any, path: Path, options: LlamaCppOptions) -> Any:
    from llama_cpp import _internals
    from llama_cpp._logger import set_verbose

    set_verbose(options.verbose)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0x7FFFFFFF if options.n_gpu_layers == -1 else options.n_gpu_layers
    params.use_extra_bufts = bool(options.extra_buffers)
    try:
        return _internals.LlamaModel(path_model=str(path), params=params, verbose=options.verbose)
    except ValueError as exc:
        raise ModelNotFound(f"llama.cpp could not load {str(path)!r}: {exc}") from None


def _kv_bytes_per_token(llama_cpp: Any, model: Any) -> int:
    """f16 K and V for every layer (an estimate: some models shape their heads differently)."""
    m = model.model
    head_dim = llama_cpp.llama_model_n_embd(m) // max(1, llama_cpp.llama_model_n_head(m))
    return 2 * 2 * llama_cpp.llama_model_n_layer(m) * llama_cpp.llama_model_n_head_kv(m) * head_dim


class LlamaStepBackend:
    """One llama.cpp context with a sequence (and KV stream) per generation; the `StepBackend`
    of `BatchScheduler`. Used only from the scheduler thread, apart from `create` and `close`."""

    def __init__(self, llama_cpp: Any, model: Any, ctx: Any, n_batch: int):
        self._lib = llama_cpp
        self._model = model
        self._ctx = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.parallel = llama_cpp.llama_n_seq_max(ctx)
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(ctx)
        self.n_batch = n_batch
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(model.vocab)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        for i in range(n_batch):
            self._batch.n_seq_id[i] = 1

    @classmethod
    def create(
        cls, llama_cpp: Any, model: Any, options: LlamaCppBatchedOptions, *, kv_unified: bool = False
    ) -> LlamaStepBackend:
        """A context with a KV stream per sequence, so that attention reads only that sequence's
        cache; `kv_unified` (for benchmarks/bench_step_shapes.py) shares one cache instead, which
        lets llama.cpp put sequences with unequal token counts into one micro-batch."""
        n_ctx = options.n_ctx or model.n_ctx_train()
        parallel = options.parallel or default_parallel(
            n_ctx, _kv_bytes_per_token(llama_cpp, model), usable_cores()
        )
        limit = llama_cpp.llama_max_parallel_sequences()
        if parallel > limit:
            raise InvalidParams.single("parallel", f"llama.cpp runs at most {limit} sequences")
        if options.n_batch < parallel:
            raise InvalidParams.single(
                "n_batch", f"must be at least parallel ({parallel}): each step decodes a token per sequence"
            )
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = _pad(n_ctx) * parallel
        params.n_seq_max = parallel
        params.kv_unified = kv_unified
        params.n_batch = params.n_ubatch = options.n_batch
        params.n_threads = params.n_threads_batch = options.n_threads
        # as LlamaCppEngine: the same numerics, so both engines give the same greedy text
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx = llama_cpp.llama_init_from_model(model.model, params)
        if ctx is None:
            raise EngineFailed(
                f"llama.cpp could not create a context for {parallel} sequences of {n_ctx} tokens"
            )
        return cls(llama_cpp, model, ctx, options.n_batch)

    def decode(self, entries: Sequence[BatchEntry]) -> list[int]:
        lib, batch = self._lib, self._batch
        token, pos, seq_id, logits = batch.token, batch.pos, batch.seq_id, batch.logits
        samples = []
        i = 0
        for entry in entries:
            p = entry.start
            for t in entry.tokens:
                token[i] = t
                pos[i] = p
                seq_id[i][0] = entry.seq
                logits[i] = 0
                i += 1
                p += 1
            if entry.sample:
                logits[i - 1] = 1
                samples.append((entry.sampler, i - 1))
        batch.n_tokens = i
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise EngineFailed(f"llama_decode failed with status {status} on a batch of {i} tokens")
        ctx = self._ctx
        return [lib.llama_sampler_sample(sampler, ctx, index) for sampler, index in samples]

    def new_sampler(self, params: SamplingParams) -> Any:
        """A sampler chain in the order of llama-cpp-python's `Llama`, so that both llama.cpp
        engines sample the same tokens for the same seed."""
        lib = self._lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lib.llama_sampler_chain_add
        if params.repetition_penalty != 1.0:
            add(
                chain,
                lib.llama_sampler_init_penalties(
                    self._n_vocab, PENALTY_LAST_N, params.repetition_penalty, 0.0, 0.0
                ),
            )
        if params.greedy:
            add(chain, lib.llama_sampler_init_greedy())
            return chain
        add(chain, lib.llama_sampler_init_top_k(params.top_k))
        add(chain, lib.llama_sampler_init_top_p(params.top_p, 1))
        add(chain, lib.llama_sampler_init_min_p(params.min_p, 1))
        add(chain, lib.llama_sampler_init_temp(params.temperature))
        add(chain, lib.llama_sampler_init_dist(params.seed if params.seed is not None else RANDOM_SEED))
        return chain

    def free_sampler(self, sampler: Any) -> None:
        if sampler is not None:
            self._lib.llama_sampler_free(sampler)

    def copy(self, src: int, dst: int) -> None:
        self._lib.llama_memory_seq_cp(self._memory, src, dst, -1, -1)

    def truncate(self, seq: int, keep: int) -> int:
        if self._lib.llama_memory_seq_rm(self._memory, seq, keep, -1):
            return keep
        self._lib.llama_memory_seq_rm(self._memory, seq, -1, -1)  # whole sequences always go
        return 0

    def idle(self) -> None:
        release_thread_team()  # see `llmflow.engines.openmp`; the next step starts a team again

    def close(self) -> None:
        with contextlib.suppress(AttributeError):
            if self._batch is not None:
                self._lib.llama_batch_free(self._batch)
                self._batch = None
            if self._ctx is not None:
                self._lib.llama_free(self._ctx)
                self._ctx = None
            self._model.close()


def _pad(n: int, to: int = 256) -> int:
    """llama.cpp rounds each sequence's context up to a multiple of 256."""
    return -(-n // to) * to
