"""llama.cpp with continuous batching: concurrent generations share one `llama_decode` per step.

Each generation runs in its own sequence of a shared llama.cpp context, with its own sampler
chain. The KV cache has one stream per sequence (`kv_unified=False`): attention then reads only
a sequence's own tokens, and on the CPU a request's output does not depend on what runs beside
it. On a GPU, where a wider batch costs little more than one token, each step is one
`llama_decode` over every decoding token and prompt chunk (a GPU's numbers depend on the batch's
size anyway), and greedy requests take the argmax of their logits instead of a llama.cpp sampler
chain, which copies every logit first. The scheduling itself is engine-independent
(`llmflow.engines.scheduler`); this module is the llama.cpp side: context, batch, samplers,
sequence moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from llmflow.engines.base import Engine, TokenRequest
from llmflow.engines.gil import holding_gil
from llmflow.engines.llama_cpp import (
    LlamaCppOptions,
    LlamaVocab,
    Placement,
    VocabMethods,
    check_draft_vocabulary,
    draft_model_file,
    open_projector,
    start_load,
    usable_cores,
)
from llmflow.engines.llama_cpp_draft import BatchedDraftModel
from llmflow.engines.llama_cpp_embed import lazy_embedder
from llmflow.engines.llama_cpp_loop import GREEDY, free_sampler, sampler_chain
from llmflow.engines.llama_cpp_media import Projector, ReadsImages
from llmflow.engines.llama_cpp_state import prompt_cache_for, restore_sequence, save_sequence
from llmflow.engines.logprobs import scored
from llmflow.engines.lora import AdapterKey, LlamaAdapters, with_adapters
from llmflow.engines.memory import llama_cpp_bytes, llama_kv_bytes_per_token
from llmflow.engines.openmp import release_thread_team
from llmflow.engines.prompt_cache import CacheStats, PromptCache, State
from llmflow.engines.scheduler import BatchEntry, BatchScheduler, SchedulerStats
from llmflow.engines.speculation import SpeculationCounts
from llmflow.errors import EngineFailed, InvalidParams, ModelNotFound
from llmflow.media.prompt import PromptImage
from llmflow.model_files import model_name_of
from llmflow.params import SamplingParams

#: the default number of sequences keeps their KV cache within about this many bytes
KV_BUDGET_BYTES = 1 << 30
#: ... and at most this many sequences per CPU core
MAX_SEQUENCES_PER_CORE = 4
#: on a GPU: at most this many sequences by default, their KV cache within about this many bytes
GPU_MAX_SEQUENCES = 64
GPU_KV_BUDGET_BYTES = 16 << 30
#: tokens per forward pass and per prompt chunk by default, on the CPU and on a GPU
CPU_N_BATCH, GPU_N_BATCH = 512, 2048
CPU_PREFILL_CHUNK, GPU_PREFILL_CHUNK = 32, 512
#: on a CPU whose cores the forward pass takes: how long the step after a request's first token
#: may wait for the server to send it (measured: well under a millisecond when it waits)
FIRST_TOKEN_WAIT_S = 0.002


class LlamaCppBatchedOptions(LlamaCppOptions):
    """Load-time options. `n_ctx` is each generation's context window; the KV cache holds
    `parallel` of them. Defaults differ on a GPU (see `batch_shape`)."""

    n_batch: int | None = Field(  # type: ignore[assignment]
        None, ge=1, description=f"tokens per forward pass; default {CPU_N_BATCH} (GPU: {GPU_N_BATCH})"
    )
    parallel: int | None = Field(
        None,
        ge=1,
        description="generations decoded together; default: from n_ctx, the model and the cores "
        f"(GPU: up to {GPU_MAX_SEQUENCES})",
    )
    prefill_chunk: int | None = Field(
        None,
        ge=1,
        description="prompt tokens per step while other generations stream: smaller keeps their "
        "tokens flowing, larger gives a new request its first token sooner; default "
        f"{CPU_PREFILL_CHUNK} (GPU: {GPU_PREFILL_CHUNK})",
    )
    kv_unified: bool = Field(
        False,
        description="one KV cache pool for all sequences: a step mixing prompt chunks and decoding "
        "tokens is one micro-batch, but attention reads the whole pool (on an H200, llama.cpp's "
        "own decode at 64 sequences measured 19% slower so); off, each sequence has its own stream",
    )
    one_pass: bool | None = Field(
        None,
        description="one llama_decode per step for the decoding tokens and the prompt chunks "
        "together; default: on a GPU (or with kv_unified). Off, each prompt chunk is a pass of its "
        "own, and on the CPU a request's numbers do not depend on what runs beside it",
    )
    wake_at_pass: bool = Field(
        False,
        description="a step's tokens go to their streams as the next forward pass starts rather "
        "than as the step ends, so the server streams them while a GPU computes instead of "
        "taking the GIL while the next pass is planned (off by default: not yet measured on a GPU)",
    )

    @field_validator("prefill_chunk")
    @classmethod
    def _chunk_fits_a_batch(cls, value: int | None, info: ValidationInfo) -> int | None:
        n_batch = info.data.get("n_batch")
        if value is not None and n_batch is not None and value > n_batch:
            raise ValueError(f"must be at most n_batch ({n_batch})")
        return value


@dataclass(frozen=True)
class BatchShape:
    """How many sequences run together and how big each step may get: the options resolved
    against the model and the hardware."""

    parallel: int
    n_batch: int
    prefill_chunk: int
    kv_unified: bool
    #: one `llama_decode` per step for decoding tokens and prompt chunks together
    one_pass: bool
    #: the model's layers run on a GPU
    on_gpu: bool


def batch_shape(
    options: LlamaCppBatchedOptions,
    *,
    on_gpu: bool,
    n_ctx: int,
    kv_bytes_per_token: int,
    cores: int,
    max_sequences: int,
) -> BatchShape:
    """Unset options get the CPU's or the GPU's defaults; a combination llama.cpp cannot run is an
    `InvalidParams` naming the option."""
    parallel = options.parallel or default_parallel(n_ctx, kv_bytes_per_token, cores, on_gpu=on_gpu)
    if parallel > max_sequences:
        raise InvalidParams.single("parallel", f"llama.cpp runs at most {max_sequences} sequences")
    n_batch = options.n_batch
    if n_batch is None:
        n_batch = max(parallel, GPU_N_BATCH if on_gpu else CPU_N_BATCH)
    elif n_batch < parallel:
        raise InvalidParams.single(
            "n_batch", f"must be at least parallel ({parallel}): each step decodes a token per sequence"
        )
    one_pass = options.one_pass
    if one_pass is None:
        one_pass = on_gpu or options.kv_unified
    # in one pass a prompt chunk shares the batch with a token of every other sequence: a chunk
    # that does not fit beside them would wait until enough of them have ended
    room = n_batch - parallel + 1 if one_pass else n_batch
    chunk = options.prefill_chunk or min(room, GPU_PREFILL_CHUNK if on_gpu else CPU_PREFILL_CHUNK)
    if chunk > room:
        limit = f"n_batch - parallel + 1 ({room}) in one pass" if one_pass else f"n_batch ({n_batch})"
        raise InvalidParams.single("prefill_chunk", f"must be at most {limit}")
    return BatchShape(parallel, n_batch, chunk, options.kv_unified, one_pass, on_gpu)


def first_token_wait_s(shape: BatchShape, n_threads: int, cores: int) -> float:
    """How long the step after requests' first tokens may wait for the server to send them: on
    the CPU with a thread per usable core, a consumer woken by a step otherwise waits for a core
    until the next pass ends; a GPU pass leaves the cores free."""
    return FIRST_TOKEN_WAIT_S if not shape.on_gpu and n_threads >= cores else 0.0


class LlamaCppBatchedEngine(ReadsImages, VocabMethods, Engine):
    """A GGUF model that decodes up to `max_concurrency` generations in one batch per step.

    `generate` may be called from many threads at once; beyond `max_concurrency` a generation
    waits for a free sequence. `stats()` tells how many run and wait."""

    name: ClassVar[str] = "llama_cpp_batched"
    concurrent: ClassVar[bool] = True
    pushes_tokens: ClassVar[bool] = True
    pip_packages: ClassVar[tuple[str, ...]] = ("llama-cpp-python",)
    thread_option: ClassVar[str | None] = "n_threads"
    scores_tokens: ClassVar[bool] = True
    lora_format: ClassVar[Literal["gguf", "peft"] | None] = "gguf"

    def __init__(
        self,
        backend: LlamaStepBackend,
        vocab: LlamaVocab,
        model_path: Path,
        options: LlamaCppBatchedOptions,
        prompt_cache: PromptCache | None = None,
        draft: BatchedDraftModel | None = None,
    ):
        self._backend = backend
        self._draft = draft
        self._projector = backend.projector
        self._prompt_cache = prompt_cache
        self._vocab = vocab
        self._model_path = model_path
        self.options = options
        self._embedder = lazy_embedder(vocab.model, options, backend.n_ctx_seq)
        shape = backend.shape
        self._scheduler = BatchScheduler(
            backend,
            parallel=shape.parallel,
            n_ctx=backend.n_ctx_seq,
            n_batch=shape.n_batch,
            prefill_chunk=shape.prefill_chunk,
            eos_token_ids=self.eos_token_ids,
            one_pass=shape.one_pass,
            reuse_tokens=options.prompt_cache,
            prompt_cache=prompt_cache,
            next_turn_openings=options.next_turn_opening,
            speculation=options.speculation(),
            draft_model=draft,
            equal_drafts=not shape.kv_unified,
            first_token_wait_s=first_token_wait_s(shape, options.n_threads, usable_cores()),
            wake_at_pass=options.wake_at_pass,
        )

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> LlamaCppBatchedEngine:
        parsed, path, llama_cpp, where = start_load(cls.name, LlamaCppBatchedOptions, model_path, options)
        model = _load_model(llama_cpp, path, parsed, where)
        projector = backend = draft = None
        try:
            vocab = LlamaVocab(model, model.metadata())
            projector = open_projector(llama_cpp, model.model, parsed, where)
            backend = LlamaStepBackend.create(llama_cpp, model, parsed, where, projector)
            if parsed.draft_model is not None:
                draft = _open_draft(llama_cpp, vocab, backend, parsed, where)
        except BaseException:
            if backend is not None:
                backend.close()  # its projector and model too
            else:
                if projector is not None:
                    projector.close()
                model.close()
            raise
        cache = prompt_cache_for(llama_cpp, cls.name, path, parsed)
        engine = cls(backend, vocab, path, parsed, cache, draft)
        return with_adapters(engine, parsed.lora)

    @property
    def lora_names(self) -> tuple[str, ...]:
        return self._backend.adapters.names

    def check_adapter(self, name: str) -> None:
        self._backend.adapters.check(name)

    def load_adapter(self, name: str, path: str) -> None:
        self._backend.adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        self._backend.adapters.unload(name)

    @property
    def model_name(self) -> str:
        return model_name_of(self._model_path)

    @property
    def max_concurrency(self) -> int:
        return self._backend.parallel

    @property
    def n_ctx(self) -> int:
        """Each generation's context window."""
        return self._backend.n_ctx_seq

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        return self._scheduler.generate(request)

    def token_group(self, requests: Sequence[TokenRequest]) -> list[Iterator[int]]:
        """The prompt computed once, its KV cache copied to the other choices' sequences."""
        return self._scheduler.generate_group(requests)

    def stats(self) -> SchedulerStats:
        return self._scheduler.stats()

    def speculation_stats(self) -> SpeculationCounts | None:
        return self._scheduler.speculation_counts if self.options.speculation() is not None else None

    def cache_stats(self) -> CacheStats | None:
        return self._prompt_cache.stats() if self._prompt_cache is not None else None

    def next_turn_tokens_computed(self) -> int | None:
        return self._scheduler.stats().next_turn_tokens_total

    def persist(self) -> None:
        self._scheduler.persist()

    def memory_bytes(self) -> int:
        """The weights and the KV cache of every sequence, the draft model's too (see
        `engines/memory.py`)."""
        kv_type = self.options.kv_cache_type
        draft = self._draft.memory_bytes(kv_type) if self._draft is not None else 0
        return self._backend.memory_bytes(kv_type) + draft

    def close(self) -> None:
        self._scheduler.close()
        if self._prompt_cache is not None:
            self._prompt_cache.close()
        self._embedder.close()
        if self._draft is not None:
            self._draft.close()
        self._backend.close()


def default_parallel(n_ctx: int, kv_bytes_per_token: int, cores: int, *, on_gpu: bool = False) -> int:
    """On the CPU, as many sequences as fit a KV cache of about `KV_BUDGET_BYTES`, at most
    `MAX_SEQUENCES_PER_CORE` per core: past that, a CPU gains no throughput from a wider batch and
    every stream slows down. On a GPU, where a step of many sequences costs little more than one,
    up to `GPU_MAX_SEQUENCES` within `GPU_KV_BUDGET_BYTES`."""
    per_sequence = max(1, n_ctx * kv_bytes_per_token)
    if on_gpu:
        return max(1, min(GPU_MAX_SEQUENCES, GPU_KV_BUDGET_BYTES // per_sequence))
    return max(1, min(MAX_SEQUENCES_PER_CORE * cores, KV_BUDGET_BYTES // per_sequence))


def _load_model(llama_cpp: Any, path: Path, options: LlamaCppOptions, where: Placement) -> Any:
    from llama_cpp import _internals
    from llama_cpp._logger import set_verbose

    set_verbose(options.verbose)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = where.n_gpu_layers
    params.use_extra_bufts = bool(options.extra_buffers)
    try:
        return _internals.LlamaModel(path_model=str(path), params=params, verbose=options.verbose)
    except ValueError as exc:
        raise ModelNotFound(f"llama.cpp could not load {str(path)!r}: {exc}") from None


def _open_draft(
    llama_cpp: Any,
    vocab: LlamaVocab,
    backend: LlamaStepBackend,
    options: LlamaCppBatchedOptions,
    where: Placement,
) -> BatchedDraftModel:
    """The options' draft model, on the same device as the model, with a sequence per generation
    slot of the model's context length."""
    path = draft_model_file(options)
    model = _load_model(llama_cpp, path, options, where)
    try:
        check_draft_vocabulary(path, LlamaVocab(model, model.metadata()), vocab)
        shape = backend.shape
        same_shape = {"parallel": shape.parallel, "n_ctx": backend.n_ctx_seq, "n_batch": shape.n_batch}
        own = options.model_copy(update={**same_shape, "prefill_chunk": None, "one_pass": None})
        draft_backend = LlamaStepBackend.create(llama_cpp, model, own, where)
    except BaseException:
        model.close()
        raise
    return BatchedDraftModel(draft_backend)


def _kv_bytes_per_token(llama_cpp: Any, model: Any, kv_cache_type: str) -> int:
    """K and V for every layer (an estimate: some models shape their heads differently)."""
    return llama_kv_bytes_per_token(llama_cpp, model.model, kv_cache_type)


class LlamaStepBackend:
    """One llama.cpp context with a sequence (and KV stream) per generation; the `StepBackend`
    of `BatchScheduler`. Used only from the scheduler thread, apart from `create` and `close`."""

    def __init__(
        self,
        llama_cpp: Any,
        model: Any,
        ctx: Any,
        shape: BatchShape,
        n_ctx_seq: int,
        projector: Projector | None = None,
    ):
        self._lib = llama_cpp
        self._model = model
        self._ctx = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.shape = shape
        self.parallel = shape.parallel
        #: each generation's context window (with one KV pool, llama.cpp itself would let one
        #: sequence take all of it)
        self.n_ctx_seq = n_ctx_seq
        self.n_batch = shape.n_batch
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(model.vocab)
        #: the calls between a step's `compute` and the next one's (the device already waited
        #: for), kept from handing the GIL to the event loop mid-step (see `engines/gil.py`)
        self._get_logits = holding_gil(llama_cpp.llama_get_logits)
        self._sampler_sample = holding_gil(llama_cpp.llama_sampler_sample)
        #: the LoRA adapters loaded on the model; a pass computes with one of them or none
        self.adapters = LlamaAdapters(llama_cpp, model.model)
        self._batch = llama_cpp.llama_batch_init(shape.n_batch, 0, 1)
        for i in range(shape.n_batch):
            self._batch.n_seq_id[i] = 1
        #: a vision model's projector, and the one thread that encodes images beside the steps
        self.projector = projector
        self._encoder = ThreadPoolExecutor(1, "llmflow-image-encoder") if projector is not None else None

    @classmethod
    def create(
        cls,
        llama_cpp: Any,
        model: Any,
        options: LlamaCppBatchedOptions,
        where: Placement,
        projector: Projector | None = None,
    ) -> LlamaStepBackend:
        n_ctx = options.n_ctx or model.n_ctx_train()
        shape = batch_shape(
            options,
            on_gpu=where.on_gpu,
            n_ctx=n_ctx,
            kv_bytes_per_token=_kv_bytes_per_token(llama_cpp, model, options.kv_cache_type),
            cores=usable_cores(),
            max_sequences=llama_cpp.llama_max_parallel_sequences(),
        )
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = _pad(n_ctx) * shape.parallel
        params.n_seq_max = shape.parallel
        params.kv_unified = shape.kv_unified
        params.n_batch = params.n_ubatch = shape.n_batch
        params.n_threads = params.n_threads_batch = options.n_threads
        # on the CPU as LlamaCppEngine: the same numerics, so both engines give the same greedy text
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if where.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.type_k = params.type_v = where.kv_type
        ctx = llama_cpp.llama_init_from_model(model.model, params)
        if ctx is None:
            raise EngineFailed(
                f"llama.cpp could not create a context for {shape.parallel} sequences of {n_ctx} tokens"
            )
        n_ctx_seq = _pad(n_ctx) if shape.kv_unified else llama_cpp.llama_n_ctx_seq(ctx)
        return cls(llama_cpp, model, ctx, shape, n_ctx_seq, projector)

    def memory_bytes(self, kv_cache_type: str) -> int:
        kv_tokens = self._lib.llama_n_ctx(self._ctx)
        return llama_cpp_bytes(self._lib, self._model.model, kv_tokens, kv_cache_type)

    def decode(self, entries: Sequence[BatchEntry]) -> list[Any]:
        samples = self.fill(entries)
        self.compute()
        return self.sample(samples)

    def fill(self, entries: Sequence[BatchEntry]) -> list[tuple[Any, int, int | None, Any, Sequence[int]]]:
        """Write the entries into the llama.cpp batch; returns (sampler, batch index, logprobs,
        allowed tokens, draft) to sample: the batch index of an entry's first row of logits."""
        batch = self._batch
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
                first = i - 1 - len(entry.draft)
                for j in range(first, i):
                    logits[j] = 1
                samples.append((entry.sampler, first, entry.logprobs, entry.allowed, entry.draft))
        batch.n_tokens = i
        return samples

    def compute(self) -> None:
        """The forward pass over the filled batch, waited for (so its time is the device's)."""
        status = self._lib.llama_decode(self._ctx, self._batch)
        if status != 0:
            raise EngineFailed(
                f"llama_decode failed with status {status} on a batch of {self._batch.n_tokens} tokens"
            )
        self._lib.llama_synchronize(self._ctx)

    def sample(self, samples: Sequence[tuple[Any, int, int | None, Any, Sequence[int]]]) -> list[Any]:
        """A token for each sample, in order (a run of tokens for one with a draft). llama.cpp
        stores the rows of logits `fill` asked for in batch order: a sample's rows follow the
        rows of the samples before it."""
        rows = self._rows(sum(1 + len(s[4]) for s in samples))
        # when every row is greedy (the usual case of a GPU benchmark): one argmax over all rows
        every_greedy = all(s[0] is GREEDY and s[3] is None for s in samples)
        picks = argmax_rows(rows) if every_greedy else None
        tokens: list[Any] = []
        row = 0
        for sampler, index, top, allowed, draft in samples:
            if not draft:
                tokens.append(self._pick(rows, row, picks, sampler, index, top, allowed))
                row += 1
                continue
            run = []
            for j in range(len(draft) + 1):
                token = self._pick(rows, row + j, picks, sampler, index + j, top, allowed if j == 0 else None)
                run.append(token)
                if j == len(draft) or token != draft[j]:
                    break
            tokens.append(run)
            row += 1 + len(draft)
        return tokens

    def _pick(
        self, rows: np.ndarray, k: int, picks: Any, sampler: Any, index: int, top: int | None, allowed: Any
    ) -> int:
        """The token sampled from row `k` (batch index `index`), masked by `allowed` in place
        (llama.cpp's own logits: its sampler chain then sees only allowed tokens); logprobs from
        the raw row."""
        raw = rows[k]
        if allowed is not None:
            if top is not None:  # logprobs stay the model's own distribution, unmasked
                raw = rows[k].copy()
            np.copyto(rows[k], -np.inf, where=~allowed[: self._n_vocab])
        if picks is not None:
            token = int(picks[k])
        elif sampler is GREEDY:
            token = int(rows[k].argmax())
        else:
            token = self._sampler_sample(sampler, self._ctx, index)
        return token if top is None else scored(token, raw, top)

    def _rows(self, n: int) -> np.ndarray:
        """The logits of the last pass's `n` output rows, as an (n, n_vocab) view of llama.cpp's
        buffer: raw unless an output constraint masked them (`sample`); a sampler chain does not
        change them."""
        if n == 0:
            return np.empty((0, self._n_vocab), dtype=np.float32)
        return np.ctypeslib.as_array(self._get_logits(self._ctx), shape=(n, self._n_vocab))

    def new_sampler(self, params: SamplingParams) -> Any:
        return sampler_chain(self._lib, self._n_vocab, params)

    def free_sampler(self, sampler: Any) -> None:
        free_sampler(self._lib, sampler)

    def copy(self, src: int, dst: int) -> None:
        """`dst` holds what `src` holds, from now on. In one KV pool that is cell bookkeeping
        (`seq_cp`). With a KV stream per sequence, llama.cpp only queues a copy between streams
        until the next pass, while a saved state is read and written at once: a state saved from
        `dst`, or restored into `src` or `dst`, before that pass would be the wrong one (another
        conversation's KV under this one's tokens). So the copy goes through the state, done
        when it returns."""
        # `dst` may still hold a finished request's cells; in one KV pool seq_cp would add src's
        # cells to them (two cells per position) rather than replace them
        self._lib.llama_memory_seq_rm(self._memory, dst, -1, -1)
        if self.shape.kv_unified:
            self._lib.llama_memory_seq_cp(self._memory, src, dst, -1, -1)
            return
        state = save_sequence(self._lib, self._ctx, src)
        if state is not None:
            restore_sequence(self._lib, self._ctx, dst, state)

    def truncate(self, seq: int, keep: int) -> int:
        if self._lib.llama_memory_seq_rm(self._memory, seq, keep, -1):
            return keep
        self._lib.llama_memory_seq_rm(self._memory, seq, -1, -1)  # whole sequences always go
        return 0

    def save(self, seq: int) -> State | None:
        return save_sequence(self._lib, self._ctx, seq)

    def restore(self, seq: int, state: State) -> bool:
        return restore_sequence(self._lib, self._ctx, seq, state)

    def encode_image(self, image: PromptImage) -> Future[Any]:
        assert self.projector is not None and self._encoder is not None, "images come only with a projector"
        return self._encoder.submit(self._encode, image)

    def _encode(self, image: PromptImage) -> Any:
        """On the encoder thread: the image encoded, then the thread's OpenMP team handed back
        (see `llmflow.engines.openmp`: more OpenMP threads than cores slow every pass)."""
        assert self.projector is not None
        try:
            return self.projector.encode(image)
        finally:
            release_thread_team()

    def decode_image(self, seq: int, image: PromptImage, encoded: Any) -> None:
        assert self.projector is not None
        self.projector.decode(self._ctx, image, encoded, seq, self.n_batch)

    def idle(self) -> None:
        release_thread_team()  # see `llmflow.engines.openmp`; the next step starts a team again

    def set_adapter(self, adapter: AdapterKey) -> None:
        self.adapters.apply(self._ctx, adapter)

    def close(self) -> None:
        with contextlib.suppress(AttributeError):
            if self._encoder is not None:
                self._encoder.shutdown(cancel_futures=True)
            if self.projector is not None:
                self.projector.close()
                self.projector = None
            if self._batch is not None:
                self._lib.llama_batch_free(self._batch)
                self._batch = None
            if self._ctx is not None:
                self._lib.llama_free(self._ctx)
                self._ctx = None
            self._model.close()


def argmax_rows(rows: np.ndarray) -> np.ndarray:
    """What llama.cpp's greedy sampler picks for each row (the first of equal maxima), without
    copying the logits into a candidate list first, in one call for all rows: for 64 rows of a
    49,152-token vocabulary, a per-row loop spent as much on the calls as on the reading."""
    return rows.argmax(axis=1)


def _pad(n: int, to: int = 256) -> int:
    """llama.cpp rounds each sequence's context up to a multiple of 256."""
    return -(-n // to) * to
