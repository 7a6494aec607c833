"""llama.cpp through llama-cpp-python: GGUF models on the CPU, or on a GPU when llama.cpp was
built with a GPU backend (CUDA, Metal, ...): then every layer runs there by default."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, ValidationInfo, field_validator

from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.engines.base import Engine, EngineOptions, TokenRequest, next_turn_tokens
from llmflow.engines.buffer_types import decide_extra_buffers
from llmflow.engines.fragments import FragmentTokenizer
from llmflow.engines.idle import IdleWork
from llmflow.engines.llama_cpp_draft import DraftModel
from llmflow.engines.llama_cpp_embed import LazyEmbedder, lazy_embedder
from llmflow.engines.llama_cpp_loop import RANDOM_SEED, ContextSteps, free_sampler, generate, sampler_chain
from llmflow.engines.llama_cpp_media import MediaOptions, Projector, ReadsImages
from llmflow.engines.llama_cpp_state import prompt_cache_for, restore_sequence, save_sequence
from llmflow.engines.lora import AdapterKey, LlamaAdapters, adapter_key, with_adapters
from llmflow.engines.memory import llama_cpp_bytes
from llmflow.engines.openmp import release_thread_team
from llmflow.engines.prompt_cache import CacheStats, PromptCache, common_prefix
from llmflow.engines.speculation import (
    DRAFT_MAX,
    NGRAM_MAX,
    NGRAM_MIN,
    PassCost,
    Speculation,
    SpeculationCounts,
)
from llmflow.errors import EngineFailed, EngineUnavailable, InvalidParams, ModelNotFound
from llmflow.media.prompt import media_images, whole_images
from llmflow.model_files import model_name_of
from llmflow.streaming.detokenizer import ByteDetokenizer, Detokenizer
from llmflow.types import TemplateText

#: whether llama.cpp engines speculate unless told: off, as measured on the CPU, where a pass of
#: several tokens costs about as much as as many one-token passes (benchmarks/bench_speculation.py)
SPECULATIVE_DEFAULT = False
#: ggml's element type ids of the KV cache types llmflow offers
KV_CACHE_TYPES: dict[str, int] = {"f16": 1, "q8_0": 8}
#: what llama.cpp reads as "every layer" (it clamps to the model's count)
ALL_LAYERS = 0x7FFFFFFF
#: a saved state is restored when it holds at least this many more of a prompt's tokens than
#: the context does (fewer are cheaper to compute than to copy in)
RESTORE_MARGIN = 32


log = logging.getLogger(__name__)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class LlamaCppOptions(EngineOptions):
    """Load-time options. llama.cpp's own default thread count is half the cores, which is
    about 25% slower on small machines, so llmflow uses every usable core."""

    n_ctx: int = Field(4096, ge=16, description="context window in tokens (0 = the model's own)")
    n_threads: int = Field(default_factory=usable_cores, ge=1)
    n_batch: int = Field(512, ge=1, description="prompt tokens per decode call")
    n_gpu_layers: int | None = Field(
        None,
        ge=-1,
        description="layers to offload to a GPU; -1 = all; default: all when llama.cpp has a GPU backend",
    )
    flash_attn: bool = Field(
        True,
        description="flash attention: on by default, on a GPU and on the CPU alike (faster on both; "
        "both llama.cpp engines share the default, so they compute the same numbers)",
    )
    kv_cache_type: Literal["f16", "q8_0"] = Field(
        "f16", description="KV cache element type: q8_0 halves its memory and needs flash attention"
    )
    verbose: bool = False
    extra_buffers: bool | None = Field(
        None,
        description="let llama.cpp put weights in its extra CPU buffer types (repacked Q4_0/Q8_0, AMX); "
        "default: yes, unless the llama.cpp build has AMX, whose matrix path crashes on some Intel Xeons",
    )
    pooling: Literal["mean", "cls", "last"] | None = Field(
        None,
        description="how /v1/embeddings pools token states; default: the model's own (GGUF metadata), "
        "which a chat model does not have",
    )
    ignore_eos: bool = Field(
        False,
        description="never end at an end-of-generation token: every answer runs to max_tokens "
        "(benchmarks); a completed output constraint still allows only those tokens",
    )
    prompt_cache: bool = Field(
        True,
        description="keep each conversation's KV state (prompt and answer) after its request and "
        "reuse the longest shared token prefix: a long chat's next turn computes only its new "
        "tokens. Off, nothing is reused (llama_cpp) or only whole prompt chunks, computed in the "
        "same splits as a cold request (llama_cpp_batched): the same request then always gives "
        "the same numbers, where reuse may change a greedy answer on builds whose kernels depend "
        "on the batch's size",
    )
    next_turn_opening: bool = Field(
        True,
        description="once idle for 0.1 s after a chat answer, compute its last token and the chat "
        "template's turn boundary in its sequence (a few tokens), so that the conversation's next "
        "turn computes only its new message; a request that comes meanwhile waits for that one pass",
    )
    prompt_cache_ram_mib: int = Field(
        1024,
        ge=0,
        description="host-memory tier of the prompt cache, in MiB: conversations that leave the "
        "engine's sequences are saved there and restored when they come back (0 = off)",
    )
    prompt_cache_dir: str | None = Field(
        None, description="disk tier of the prompt cache: saved states outlive a restart"
    )
    prompt_cache_disk_mib: int = Field(4096, ge=0, description="disk tier's budget in MiB")
    lora: dict[str, str] = Field(
        default_factory=dict,
        description="LoRA adapters to load, name -> GGUF adapter file; a request picks one by name "
        "(llama_cpp engine)",
    )

    speculative: bool = Field(
        SPECULATIVE_DEFAULT,
        description="prompt-lookup speculative decoding: each forward pass also verifies a draft "
        "of the tokens that followed the answer's last n-gram where it occurred earlier in the "
        "prompt or the answer; the same tokens in fewer passes when an answer repeats its prompt "
        "(rewrites, edits). Off by default: it pays only where a pass of several tokens costs little "
        "more than a pass of one. A request opts out with `speculative: false`",
    )
    draft_model: str | None = Field(
        None,
        description="a small GGUF model of the same vocabulary whose greedy continuation is the "
        "draft each pass verifies, instead of prompt lookup (turns speculation on)",
    )
    mmproj: str | None = Field(
        None,
        description="a vision model's projector GGUF (`mmproj`): the model then reads images, "
        "through llama.cpp's multimodal library",
    )
    image_cache_mib: int = Field(
        256, ge=0, description="encoded images kept by hash, in MiB: a resent image is not encoded again"
    )
    draft_min: int = Field(
        0,
        ge=0,
        le=64,
        description="draft tokens per pass at least, whenever a draft is found (0: as many as pay, "
        "by the engine's measured pass cost and the answer's acceptance)",
    )
    draft_max: int = Field(DRAFT_MAX, ge=1, le=64, description="draft tokens per pass at most")
    draft_ngram_min: int = Field(NGRAM_MIN, ge=1, le=16, description="shortest n-gram looked up")
    draft_ngram_max: int = Field(NGRAM_MAX, ge=1, le=16, description="longest n-gram looked up (tried first)")

    @field_validator("draft_max", "draft_ngram_max")
    @classmethod
    def _bounds_ordered(cls, value: int, info: ValidationInfo) -> int:
        """An upper bound at least its lower bound (`draft_max` >= `draft_min`, n-gram sizes)."""
        lower = (info.field_name or "").replace("_max", "_min")
        low = info.data.get(lower)
        if low is not None and value < low:
            raise ValueError(f"must be at least {lower} ({low})")
        return value

    def speculation(self) -> Speculation | None:
        """The speculation these options ask for, or None."""
        if not (self.speculative or self.draft_model):
            return None
        return Speculation(self.draft_max, self.draft_ngram_min, self.draft_ngram_max, self.draft_min)

    @field_validator("kv_cache_type")
    @classmethod
    def _quantized_cache_needs_flash_attention(cls, value: str, info: ValidationInfo) -> str:
        if value != "f16" and info.data.get("flash_attn") is False:
            raise ValueError(f"{value} needs flash_attn (llama.cpp quantizes V only with flash attention)")
        return value


@dataclass(frozen=True)
class Placement:
    """Where and how llama.cpp runs the model: the options resolved against the build."""

    n_gpu_layers: int
    flash_attn: bool
    #: ggml type id of K and V in the cache
    kv_type: int

    @property
    def on_gpu(self) -> bool:
        return self.n_gpu_layers != 0


def placement(options: LlamaCppOptions, gpu_backend: bool) -> Placement:
    """Every layer on the GPU unless told otherwise. `gpu_backend`: llama.cpp was built with one."""
    layers = options.n_gpu_layers
    if layers is None or layers == -1:
        layers = ALL_LAYERS if gpu_backend else 0
    if not gpu_backend:
        layers = 0  # llama.cpp would ignore them; say so in `Placement` too
    return Placement(layers, options.flash_attn, KV_CACHE_TYPES[options.kv_cache_type])


OptionsT = TypeVar("OptionsT", bound="LlamaCppOptions")


def resolve_load(llama_cpp: Any, options: OptionsT) -> tuple[OptionsT, Placement]:
    """What both llama.cpp engines decide before loading: the options with the extra-buffer
    decision made (kept in them, so that `engine.options` says what was loaded) and where the
    model runs."""
    options = options.model_copy(
        update={"extra_buffers": decide_extra_buffers(llama_cpp, options.extra_buffers)}
    )
    return options, placement(options, has_gpu_backend(llama_cpp))


def start_load(
    engine_name: str, options_type: type[OptionsT], model_path: str | Path, options: Mapping[str, Any]
) -> tuple[OptionsT, Path, Any, Placement]:
    """The start of both llama.cpp engines' `load`: the options validated, the GGUF file found and
    llama_cpp imported (a clear error for each), then `resolve_load`. The options, the file, the
    llama_cpp module and where the model runs."""
    parsed = options_type.parse(options)
    path = gguf_file(model_path)
    llama_cpp = import_llama_cpp(engine_name)
    parsed, where = resolve_load(llama_cpp, parsed)
    return parsed, path, llama_cpp, where


def has_gpu_backend(llama_cpp: Any) -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


class VocabMethods:
    """The engine methods both llama.cpp engines share: the vocabulary, and embeddings from a
    context of their own (`llmflow.engines.llama_cpp_embed`)."""

    _vocab: LlamaVocab
    _embedder: LazyEmbedder
    options: LlamaCppOptions

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._embedder.embed(inputs)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset() if self.options.ignore_eos else self._vocab.eos_token_ids

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._vocab.metadata)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self._vocab.tokenize(text, add_special=add_special, parse_special=parse_special)

    @property
    def n_vocab(self) -> int:
        return self._vocab.n_vocab

    def token_piece(self, token_id: int) -> bytes:
        return self._vocab.special_piece(token_id)

    def template_text(self) -> TemplateText:
        return self._vocab.template_text()

    def detokenizer(self) -> Detokenizer:
        return self._vocab.detokenizer()

    def token_vocabulary(self) -> TokenVocabulary:
        return self._vocab.token_vocabulary


class LlamaCppEngine(ReadsImages, VocabMethods, Engine):
    """One llama.cpp model and context. Generations run one at a time (callers serialise).
    With `prompt_cache` the context keeps the last conversation (prompt and answer), so its next
    turn computes only its new tokens, and a conversation it replaces goes to the prompt cache
    (host memory, disk), from which it is restored when it comes back."""

    name: ClassVar[str] = "llama_cpp"
    pip_packages: ClassVar[tuple[str, ...]] = ("llama-cpp-python",)
    thread_option: ClassVar[str | None] = "n_threads"
    scores_tokens: ClassVar[bool] = True
    lora_format: ClassVar[Literal["gguf", "peft"] | None] = "gguf"

    def __init__(
        self,
        llama: Any,
        model_path: Path,
        options: LlamaCppOptions,
        prompt_cache: PromptCache | None = None,
        draft: DraftModel | None = None,
        projector: Projector | None = None,
    ):
        self._llama = llama
        self._projector = projector
        self._prompt_cache = prompt_cache
        self._model_path = model_path
        self.options = options
        self._vocab = LlamaVocab(llama._model, llama.metadata)
        self._embedder = lazy_embedder(self._vocab.model, options, self.n_ctx)
        import llama_cpp

        self._adapters = LlamaAdapters(llama_cpp, llama._model.model)
        #: the adapter the context's kept tokens were computed with
        self._applied: AdapterKey = None
        self._steps = ContextSteps(llama_cpp, llama, self.n_vocab, projector)
        self._speculation = options.speculation()
        self._speculation_counts = SpeculationCounts()
        #: what a pass of several tokens costs on this engine, learned from its passes
        self._pass_cost = PassCost()
        self._draft_model = draft
        #: the last answer's next-turn opening, computed once idle
        self._idle = IdleWork()
        self.next_turn_tokens_total = 0

    @property
    def llama(self) -> Any:
        """The llama-cpp-python `Llama` this engine decodes with: a documented hook for comparing
        llmflow against llama-cpp-python on the same model object (`benchmarks/bench_engine.py`).
        Using it while the engine generates, or resetting it, breaks the engine's own state."""
        return self._llama

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> LlamaCppEngine:
        parsed, path, llama_cpp, where = start_load(cls.name, LlamaCppOptions, model_path, options)
        llama = _open_llama(path, parsed, where, parsed.n_ctx)
        draft = None
        if parsed.draft_model is not None:
            try:
                draft = _open_draft(llama_cpp, llama, parsed, where)
            except BaseException:
                llama.close()
                raise
        try:
            projector = open_projector(llama_cpp, llama._model.model, parsed, where)
        except BaseException:
            llama.close()
            raise
        cache = prompt_cache_for(llama_cpp, cls.name, path, parsed)
        engine = cls(llama, path, parsed, cache, draft, projector)
        return with_adapters(engine, parsed.lora)

    @property
    def lora_names(self) -> tuple[str, ...]:
        return self._adapters.names

    def check_adapter(self, name: str) -> None:
        self._adapters.check(name)

    def load_adapter(self, name: str, path: str) -> None:
        self._idle.settle()  # no pass runs while the model's adapters change
        self._adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        self._idle.settle()
        self._adapters.unload(name)

    @property
    def model_name(self) -> str:
        return model_name_of(self._model_path)

    @property
    def n_ctx(self) -> int:
        return self._llama.n_ctx()

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        import llama_cpp

        self._idle.settle()  # a next-turn opening being computed ends first (a few tokens)
        llama = self._llama
        adapter = adapter_key(request.params.lora, request.params.lora_scale)
        if adapter != self._applied:  # the kept tokens were computed with another adapter
            self._adapters.apply(llama.ctx, adapter)
            self._applied = adapter
            llama.reset()
        if not self.options.prompt_cache:
            self._llama.reset()  # evaluate the whole prompt: the same request gives the same numbers
        else:
            # the prompt cache holds the base model's states: with an adapter, the context's own only
            kept = (
                self._keep_own_prefix(request.prompt_ids)
                if adapter is not None
                else self._keep_longest_prefix(request.prompt_ids)
            )
            if request.reuse is not None:
                request.reuse.cached_tokens = kept
        speculation = self._speculation if request.params.speculative else None
        sampler = sampler_chain(llama_cpp, self.n_vocab, request.params)
        answer: list[int] = []
        try:
            # a draft model reads text alone: a prompt with images is drafted by prompt lookup
            text_only = not media_images(request.prompt_ids)
            drafter = self._draft_model.session if self._draft_model is not None and text_only else None
            for token in generate(
                self._steps, request, sampler, speculation, self._speculation_counts, drafter, self._pass_cost
            ):
                answer.append(token)
                yield token
        finally:
            free_sampler(llama_cpp, sampler)
            release_thread_team()  # see `llmflow.engines.openmp`: callers' threads vary
            self._note_opening(request, answer, adapter)

    def _note_opening(self, request: TokenRequest, answer: list[int], adapter: AdapterKey) -> None:
        """After an answer that ended by itself (an end-of-generation token or its limit; not a
        stop string, not a cancel, not with an adapter), its next-turn opening once idle
        (`next_turn_tokens`: after what the context holds, the last token sampled at least)."""
        opening = request.next_turn_opening
        if not (opening and answer and self.options.prompt_cache and self.options.next_turn_opening):
            return
        ended = answer[-1] in self.eos_token_ids or len(answer) >= request.limit
        if not ended or adapter is not None or request.cancel.cancelled:
            return
        written = [*request.prompt_ids, *answer]
        llama = self._llama
        kept = common_prefix(llama.input_ids[: llama.n_tokens].tolist(), written)
        tokens = next_turn_tokens(written[kept:], self.eos_token_ids, opening)
        if kept + len(tokens) <= self.n_ctx:
            self._idle.schedule(partial(self._open_next_turn, kept, tokens))

    def _open_next_turn(self, kept: int, tokens: list[int]) -> None:
        """Compute the opening after the `kept` tokens the answer left in the context (in the
        idle work's thread; whatever of it the next prompt does not match is dropped then)."""
        try:
            self._steps.rewind(kept)  # cells past it: a rejected draft
            self._steps.feed(tokens, rows=0)
        except EngineFailed as exc:
            log.warning("computing a next-turn opening failed: %s", exc)
            self._steps.rewind(kept)
            return
        finally:
            release_thread_team()
        self.next_turn_tokens_total += len(tokens)

    def _keep_own_prefix(self, prompt: Sequence[int]) -> int:
        """Keep the longest prefix of `prompt` that the context holds, never all of it."""
        import llama_cpp

        llama = self._llama
        keep = whole_images(
            prompt, min(common_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt), len(prompt) - 1)
        )
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama.ctx), -1, keep, -1)
        llama.n_tokens = keep
        return keep

    def _keep_longest_prefix(self, prompt: Sequence[int]) -> int:
        """Leave in the context the longest kept prefix of `prompt` (the context's own, or a
        saved state restored), never all of it: the last prompt token's logits give the first
        token. How many tokens it holds; `Llama.generate` computes the rest."""
        import llama_cpp

        llama, cache = self._llama, self._prompt_cache
        held = llama.input_ids[: llama.n_tokens].tolist()
        limit = len(prompt) - 1
        keep = min(common_prefix(held, prompt), limit)
        if cache is not None:
            saved, key = cache.longest(prompt)
            if key is not None and min(saved, limit) >= keep + RESTORE_MARGIN:
                self._spill(held)
                keep = self._restore(key, prompt)
            elif len(held) - keep >= cache.min_tokens:
                self._spill(held)
        keep = whole_images(prompt, keep)
        memory = llama_cpp.llama_get_memory(llama.ctx)
        llama_cpp.llama_memory_seq_rm(memory, -1, keep, -1)
        llama.n_tokens = keep
        return keep

    def _restore(self, key: str, prompt: Sequence[int]) -> int:
        """Load a saved state into the context; how many of `prompt`'s tokens it holds."""
        import llama_cpp

        assert self._prompt_cache is not None
        loaded = self._prompt_cache.load(key)
        llama = self._llama
        if loaded is None or not restore_sequence(llama_cpp, llama.ctx, 0, loaded[1]):
            return 0
        tokens = loaded[0]
        llama.input_ids[: len(tokens)] = tokens
        return min(common_prefix(tokens, prompt), len(prompt) - 1)

    def _spill(self, held: list[int]) -> None:
        """Save the context's conversation to the prompt cache before it is replaced."""
        import llama_cpp

        cache = self._prompt_cache
        if cache is None or cache.covers(held):
            return
        state = save_sequence(llama_cpp, self._llama.ctx, 0)
        if state is not None:
            cache.put(held, state)

    def cache_stats(self) -> CacheStats | None:
        return self._prompt_cache.stats() if self._prompt_cache is not None else None

    def next_turn_tokens_computed(self) -> int | None:
        return self.next_turn_tokens_total

    def speculation_stats(self) -> SpeculationCounts | None:
        return self._speculation_counts if self._speculation is not None else None

    def persist(self) -> None:
        """Called with no generation running (callers serialise generations)."""
        self._idle.settle()
        cache = self._prompt_cache
        if cache is not None and cache.persistent and self._applied is None:
            self._spill(self._llama.input_ids[: self._llama.n_tokens].tolist())
            cache.flush()

    def memory_bytes(self) -> int:
        """The weights and the context's KV cache, the draft model's too (see `engines/memory.py`)."""
        import llama_cpp

        kv_type = self.options.kv_cache_type
        used = llama_cpp_bytes(llama_cpp, self._llama._model.model, self.n_ctx, kv_type)
        if self._draft_model is not None:
            used += llama_cpp_bytes(llama_cpp, self._draft_model.llama._model.model, self.n_ctx, kv_type)
        return used

    def close(self) -> None:
        self._idle.settle()
        if self._prompt_cache is not None:
            self.persist()  # with a disk tier, the conversation outlives the process
            self._prompt_cache.close()
        self._embedder.close()
        self._steps.close()
        self._llama.close()
        if self._draft_model is not None:
            self._draft_model.close()
        if self._projector is not None:
            self._projector.close()


def _open_llama(path: Path, parsed: LlamaCppOptions, where: Placement, n_ctx: int) -> Any:
    """A llama-cpp-python `Llama` of the GGUF at `path` as the options and placement say."""
    from llama_cpp import Llama

    try:
        with model_params_override(use_extra_bufts=parsed.extra_buffers):
            return Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=parsed.n_threads,
                n_threads_batch=parsed.n_threads,
                n_batch=parsed.n_batch,
                n_gpu_layers=where.n_gpu_layers,
                flash_attn=where.flash_attn,
                type_k=where.kv_type,
                type_v=where.kv_type,
                seed=parsed.seed if parsed.seed is not None else RANDOM_SEED,
                verbose=parsed.verbose,
            )
    except ValueError as exc:
        raise ModelNotFound(f"llama.cpp could not load {str(path)!r}: {exc}") from None


def open_projector(llama_cpp: Any, model: Any, parsed: LlamaCppOptions, where: Placement) -> Projector | None:
    """The options' `mmproj` projector for `model`, on the model's device; None without one."""
    if parsed.mmproj is None:
        return None
    path = Path(parsed.mmproj)
    if not path.is_file():
        raise InvalidParams.single("mmproj", f"no projector GGUF file at {str(path)!r}")
    options = MediaOptions(
        path, where.on_gpu, parsed.n_threads, where.flash_attn, parsed.image_cache_mib << 20, parsed.verbose
    )
    return Projector(llama_cpp, model, options)


def draft_model_file(options: LlamaCppOptions) -> Path:
    """The file `draft_model` names; a missing one is an error naming the option."""
    path = Path(str(options.draft_model))
    if not path.is_file():
        raise InvalidParams.single("draft_model", f"no GGUF file at {str(path)!r}")
    return path


def check_draft_vocabulary(path: Path, draft: LlamaVocab, model: LlamaVocab) -> None:
    """A draft model of another vocabulary is refused: its token ids would mean other text."""
    if draft.pieces != model.pieces:
        raise InvalidParams.single("draft_model", f"{path.name} has another vocabulary than the model")


def _open_draft(llama_cpp: Any, llama: Any, parsed: LlamaCppOptions, where: Placement) -> DraftModel:
    """The options' draft model, on the same device as the model and with its context length."""
    path = draft_model_file(parsed)
    draft = _open_llama(path, parsed, where, llama.n_ctx())
    vocab = LlamaVocab(llama._model, llama.metadata)
    try:
        check_draft_vocabulary(path, LlamaVocab(draft._model, draft.metadata), vocab)
    except InvalidParams:
        draft.close()
        raise
    return DraftModel(llama_cpp, draft, len(vocab.pieces))


_MODEL_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def model_params_override(**fields: Any) -> Iterator[None]:
    """Model params for the `Llama` objects made inside the block.

    `Llama` builds its model params from `llama_model_default_params()` and has no argument for
    some of them (`use_extra_bufts`), so the block hands it defaults with `fields` set. The lock
    keeps two loads in different threads from seeing each other's fields."""
    import llama_cpp.llama_cpp as lib

    with _MODEL_PARAMS_LOCK:
        defaults = lib.llama_model_default_params

        def with_fields() -> Any:
            params = defaults()
            for name, value in fields.items():
                setattr(params, name, value)
            return params

        lib.llama_model_default_params = with_fields
        try:
            yield
        finally:
            lib.llama_model_default_params = defaults


def gguf_file(model_path: str | Path) -> Path:
    path = Path(model_path)
    if not path.is_file():
        raise ModelNotFound(f"no GGUF file at {str(path)!r}")
    return path


def import_llama_cpp(engine_name: str) -> Any:
    """The llama_cpp module, or a clear error when llama-cpp-python is not installed."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise EngineUnavailable(f"the {engine_name} engine needs llama-cpp-python: {exc}") from None
    return llama_cpp


class LlamaVocab:
    """The text side of a loaded GGUF model, shared by the llama.cpp engines: tokenization,
    every token's bytes, the end-of-generation tokens and the chat template."""

    def __init__(self, model: Any, metadata: dict[str, str]):
        """`model` is a `llama_cpp._internals.LlamaModel`."""
        import llama_cpp

        self.model = model
        self._model = model
        self.metadata = metadata
        vocab = model.vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        self.pieces = _token_pieces(llama_cpp, vocab, self.n_vocab)
        self.eos_token_ids = frozenset(
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)
        )
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self._add_eos = bool(llama_cpp.llama_vocab_get_add_eos(vocab))
        self._bos, self._eos = llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)
        self.bos_text = _special_text(llama_cpp, vocab, llama_cpp.llama_vocab_bos(vocab))
        self.eos_text = _special_text(llama_cpp, vocab, llama_cpp.llama_vocab_eos(vocab))

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """With special tokens parsed, fragment by fragment where that is llama.cpp's own result
        (`fragments`): a conversation's earlier messages are not tokenized again each turn."""
        add_bos = add_special and self.add_bos
        if add_bos and self.bos_text and text.startswith(self.bos_text):
            add_bos = False  # the template wrote BOS already
        data = text.encode("utf-8")
        fragments = self.fragments if parse_special else None
        if fragments is None:
            return self._tokenize(data, add_bos, parse_special)
        tokens = fragments.tokenize(data)
        if add_bos:  # as llama.cpp adds them: BOS, and EOS where the vocabulary asks for it
            tokens = [self._bos, *tokens, *([self._eos] if self._add_eos else [])]
        return tokens

    def _tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        """One call into llama.cpp with room for a token per byte (and BOS/EOS): llama-cpp-python's
        own sizes its buffer by the model's training context and tokenizes a longer text twice."""
        import llama_cpp

        vocab, room = self._model.vocab, len(data) + 2
        while True:  # a second round only where a vocabulary adds more than it reads (-n: room needed)
            tokens = (llama_cpp.llama_token * room)()
            n = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, room, add_special, parse_special)
            if n >= 0:
                return tokens[:n]
            room = -n

    @cached_property
    def fragments(self) -> FragmentTokenizer | None:
        """Fragment-by-fragment tokenization, for a byte-level BPE vocabulary (GPT-2's kind: the
        text between two special tokens is tokenized on its own) whose special tokens split a
        text unambiguously (`FragmentTokenizer.of`); else None. Built at the first request."""
        import llama_cpp

        vocab = self._model.vocab
        if llama_cpp.llama_vocab_type(vocab) != llama_cpp.LLAMA_VOCAB_TYPE_BPE:
            return None
        if self.metadata.get("tokenizer.ggml.model") != "gpt2":
            return None
        split_at = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        split_at |= llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        strips = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
        specials: dict[bytes, int] = {}
        for token in range(self.n_vocab):
            attr = llama_cpp.llama_vocab_get_attr(vocab, token)
            if not attr & split_at:
                continue
            text = llama_cpp.llama_vocab_get_text(vocab, token)
            if attr & strips or text in specials:  # whitespace taken, or one text for two tokens
                return None
            specials[text] = token
        return FragmentTokenizer.of(specials, lambda fragment: self._tokenize(fragment, False, False))

    def special_piece(self, token_id: int) -> bytes:
        """A token's bytes with a special token as its text (not a per-token path)."""
        import llama_cpp

        return _piece(llama_cpp, self._model.vocab, token_id, special=True)

    def template_text(self) -> TemplateText:
        source = self.metadata.get("tokenizer.chat_template") or None
        return TemplateText(source, bos_token=self.bos_text, eos_token=self.eos_text)

    def detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(self.pieces.__getitem__)

    @cached_property
    def token_vocabulary(self) -> TokenVocabulary:
        """Built at the first constrained request: control tokens as their text (`<|im_end|>`)."""
        import llama_cpp

        vocab = self._model.vocab
        special = frozenset(
            t
            for t in range(self.n_vocab)
            if llama_cpp.llama_vocab_get_attr(vocab, t) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        )
        tokens = [
            _piece(llama_cpp, vocab, t, special=True) if t in special else piece
            for t, piece in enumerate(self.pieces)
        ]
        model = self._model
        return TokenVocabulary(
            tokens,
            special,
            self.eos_token_ids,
            lambda text: model.tokenize(text, False, False),
            self.n_vocab,
        )


def _special_text(llama_cpp: Any, vocab: Any, token_id: int) -> str:
    if token_id < 0:
        return ""
    return _piece(llama_cpp, vocab, token_id, special=True).decode("utf-8", errors="replace")


def _piece(llama_cpp: Any, vocab: Any, token_id: int, *, special: bool) -> bytes:
    buffer = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token_id, buffer, len(buffer), 0, special)
    if n < 0:  # the piece is longer than the buffer
        buffer = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token_id, buffer, len(buffer), 0, special)
    return buffer.raw[:n]


def _token_pieces(llama_cpp: Any, vocab: Any, n_vocab: int) -> list[bytes]:
    """Every token's bytes, once at load, so the per-token path is a list lookup.

    Control tokens render as nothing (special=False): they end or structure a turn, they are
    not text."""
    return [_piece(llama_cpp, vocab, t, special=False) for t in range(n_vocab)]
