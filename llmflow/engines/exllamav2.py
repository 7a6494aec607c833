"""ExLlamaV2 on CUDA: EXL2-quantised or plain FP16 safetensors model directories (the seed's engine).

Decoding drives the model's forward pass and ExLlamaV2's sampler one token at a time, as its
streaming generator does, so cancellation and `max_tokens` act between two tokens and text, stop
strings and usage go through `llmflow.streaming` like every other engine. `exllamav2` and `torch`
are imported only when a model is loaded (the first import compiles ExLlamaV2's CUDA extension).

Without flash-attn, ExLlamaV2 attends through torch's `scaled_dot_product_attention`, and on a
Hopper GPU torch picks its cuDNN backend, which builds a plan for every new sequence length: the
first time a process decodes at each length costs several times a normal step (1B-shaped model on
an H200: 45 ms instead of 6.7 ms per token). `cudnn_attention=False` turns that backend off for the
whole process (torch then uses flash attention: 7.6 ms per token on the first pass), or install
flash-attn.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from llmflow.constraints.matcher import TokenMatcher
from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.engines.base import Engine, EngineOptions, TokenRequest
from llmflow.engines.hf_files import HfModelDir, token_vocabulary
from llmflow.engines.logprobs import scored_tensor
from llmflow.errors import EngineUnavailable, ModelNotFound
from llmflow.params import SamplingParams
from llmflow.streaming.detokenizer import ByteDetokenizer, Detokenizer
from llmflow.types import CancelToken, TemplateText

logger = logging.getLogger(__name__)

CacheType = Literal["fp16", "q8", "q6", "q4"]
_CACHE_CLASSES: dict[str, str] = {
    "fp16": "ExLlamaV2Cache",
    "q8": "ExLlamaV2Cache_Q8",
    "q6": "ExLlamaV2Cache_Q6",
    "q4": "ExLlamaV2Cache_Q4",
}
WARMUP_TOKENS = 16
INSTALL_HINT = "pip install 'llmflow[exllamav2]' on a machine with a CUDA GPU and the CUDA toolkit"


class ExLlamaV2Options(EngineOptions):
    """Load-time options. The seed used a Q4 cache with max_seq_len 8192: a quarter of the
    FP16 cache's memory for a small loss of quality."""

    cache_type: CacheType = Field("fp16", description="KV cache precision: fp16, q8, q6 or q4")
    max_seq_len: int | None = Field(
        4096, ge=16, description="context window in tokens (None = the model's own)"
    )
    autosplit: bool = Field(True, description="spread layers over every visible GPU as they fill")
    gpu_split: tuple[float, ...] | None = Field(
        None, description="GB of weights per GPU (with autosplit=false); None = the first GPU"
    )
    warmup: bool = Field(True, description="run a short generation at load so the first request is fast")
    cudnn_attention: bool = Field(
        True, description="false: turn torch's cuDNN attention off, process-wide (see the module notes)"
    )

    @model_validator(mode="after")
    def _split_needs_manual_mode(self) -> ExLlamaV2Options:
        if self.gpu_split is not None and self.autosplit:
            raise ValueError("gpu_split needs autosplit=false")
        return self


def unavailable_reason() -> str | None:
    """Why this engine cannot run here, or None; never imports exllamav2 (which would compile)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return f"the exllamav2 engine needs torch and exllamav2: {INSTALL_HINT}"
    import torch

    if not torch.cuda.is_available():
        return "the exllamav2 engine needs a CUDA GPU; torch sees none"
    if importlib.util.find_spec("exllamav2") is None:
        return f"the exllamav2 engine needs the exllamav2 package: {INSTALL_HINT}"
    return None


def _import_exllamav2() -> Any:
    reason = unavailable_reason()
    if reason is not None:
        raise EngineUnavailable(reason)
    try:
        import exllamav2
        import exllamav2.generator
    except Exception as exc:  # ImportError, or the JIT build of its CUDA extension failing
        raise EngineUnavailable(f"exllamav2 could not be imported: {type(exc).__name__}: {exc}") from None
    return exllamav2


def sampler_settings(settings_class: Any, params: SamplingParams) -> Any:
    """llmflow's params as `ExLlamaV2Sampler.Settings`. ExLlamaV2 turns each filter off with the
    same values as llmflow (top_k 0, top_p 1, min_p 0); greedy is top_k 1. The repetition penalty
    covers the whole context, ExLlamaV2's default range."""
    settings = settings_class()
    settings.temperature = params.temperature
    settings.top_k = params.top_k
    settings.top_p = params.top_p
    settings.min_p = params.min_p
    settings.token_repetition_penalty = params.repetition_penalty
    if params.greedy:
        settings.temperature, settings.top_k, settings.top_p, settings.min_p = 1.0, 1, 0.0, 0.0
    return settings


class ExLlamaV2Engine(Engine):
    """One model and one KV cache on the GPU. Generations run one at a time (callers serialise);
    the cache keeps the previous sequence, so a shared prefix is not computed twice."""

    name: ClassVar[str] = "exllamav2"
    pip_packages: ClassVar[tuple[str, ...]] = ("exllamav2",)
    scores_tokens: ClassVar[bool] = True

    def __init__(
        self, exl: Any, model: Any, cache: Any, tokenizer: Any, files: HfModelDir, options: ExLlamaV2Options
    ):
        import torch

        self._torch = torch
        self._sampler = exl.generator.ExLlamaV2Sampler
        self.model = model
        self.cache = cache
        self.tokenizer = tokenizer
        self.options = options
        self._path = files.path
        self._files = files
        self._pieces = files.token_bytes(model.config.vocab_size)
        self._special = files.special_token_texts()
        self._eos = files.eos_token_ids() | _ids(tokenizer.eos_token_id)
        self._template_text = files.template_text()
        self._add_bos = files.adds_bos()
        self._bos_id = files.bos_token_id()
        self._bos_text = files.bos_text
        # token ids of the sequence being decoded (what the sampler's repetition penalty sees)
        self._sequence = torch.zeros((1, cache.max_seq_len), dtype=torch.long)
        self._length = 0  # tokens in `_sequence`
        self._last = 0  # its last token, the next one to feed
        self._cached: list[int] = []  # token ids whose keys/values are in the cache, in order

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> ExLlamaV2Engine:
        parsed = ExLlamaV2Options.parse(options)
        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"no model directory with a config.json at {str(path)!r}")
        if not any(path.glob("*.safetensors")) or not (path / "tokenizer.json").is_file():
            raise ModelNotFound(f"{str(path)!r} needs *.safetensors weights and a tokenizer.json")
        files = HfModelDir(path)
        files.token_bytes()  # an unsupported tokenizer fails here, before the GPU is touched
        exl = _import_exllamav2()
        model, cache, tokenizer = _load_model(exl, path, parsed)
        engine = cls(exl, model, cache, tokenizer, files, parsed)
        if parsed.warmup:
            engine.warm_up()
        return engine

    @property
    def model_name(self) -> str:
        return self._path.name

    @property
    def n_ctx(self) -> int:
        return self.cache.max_seq_len

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, encode_special_tokens=parse_special)[0].tolist()
        if (
            add_special
            and self._add_bos
            and self._bos_id is not None
            and not (self._bos_text and text.startswith(self._bos_text))
        ):
            ids.insert(0, self._bos_id)  # unless the template wrote BOS already
        return ids

    @property
    def n_vocab(self) -> int:
        return len(self._pieces)

    def token_piece(self, token_id: int) -> bytes:
        return self._special.get(token_id) or self._pieces[token_id]

    def template_text(self) -> TemplateText:
        return self._template_text

    def detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(self._pieces.__getitem__)

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        if not request.prompt_ids:
            return
        cancel, constraint = request.cancel, request.constraint
        settings = sampler_settings(self._sampler.Settings, request.params)
        rng = random.Random(request.params.seed)
        self._prefill(request.prompt_ids)
        for _ in range(request.limit):
            # Check between tokens: resuming this generator is what decodes the next one.
            token = self._step(settings, rng, constraint, request.params.logprobs)
            if constraint is not None:
                constraint.advance(token)
            yield token
            if cancel.cancelled:
                return

    def token_vocabulary(self) -> TokenVocabulary:
        tokenizer = self.tokenizer

        def encode(text: bytes) -> list[int]:
            return tokenizer.encode(text.decode("utf-8", errors="replace"), add_bos=False)[0].tolist()

        return token_vocabulary(self._files.tokenizer_json, self._eos, encode, len(self._pieces))

    def clear_cache(self) -> None:
        """Forget the cached sequence: the next prompt is computed from its first token."""
        self._cached.clear()
        self.cache.current_seq_len = 0

    def warm_up(self) -> None:
        """ExLlamaV2's first forward passes are slow (kernel selection, allocations): do them now."""
        prompt = self.tokenize("Hello, how are you?")
        tokens = self.generate(prompt, SamplingParams(temperature=0.0), CancelToken())
        for _ in islice(tokens, WARMUP_TOKENS):
            pass
        tokens.close()
        self.clear_cache()

    def close(self) -> None:
        if self.cache is None:
            return
        self.clear_cache()
        self.model.unload()
        self.cache = None
        self._torch.cuda.empty_cache()

    def _prefill(self, prompt_ids: Sequence[int]) -> None:
        """Fill the cache with all prompt tokens but the last, reusing the longest cached prefix;
        the last one is fed by the first `_step`."""
        torch = self._torch
        head = list(prompt_ids[:-1])
        keep = _common_prefix(self._cached, head)
        del self._cached[keep:]
        self.cache.current_seq_len = keep
        self._sequence[0, : len(prompt_ids)] = torch.tensor(prompt_ids, dtype=torch.long)
        self._length = len(prompt_ids)
        self._last = prompt_ids[-1]
        if keep < len(head):
            try:
                self.model.forward(self._sequence[:, keep : len(head)], self.cache, preprocess_only=True)
            except BaseException:
                self.clear_cache()
                raise
            self._cached.extend(head[keep:])

    def _step(
        self,
        settings: Any,
        rng: random.Random,
        constraint: TokenMatcher | None = None,
        logprobs: int | None = None,
    ) -> int:
        """Feed the sequence's last token, sample the next one (from the logits the output
        constraint allows) and append it. With `logprobs`, it comes as a `ScoredToken` scored
        from the raw logits (before the mask and the sampler's filters), as on every engine."""
        n = self._length
        try:
            logits = self.model.forward(self._sequence[:, n - 1 : n], self.cache)
        except BaseException:
            self.clear_cache()
            raise
        self._cached.append(self._last)
        logits = logits.float().cpu()
        raw = logits.view(-1).clone() if logprobs is not None else None
        if constraint is not None:
            constraint.mask_torch(logits.view(-1))
        token, *_ = self._sampler.sample(
            logits, settings, self._sequence[:, :n], rng.random(), self.tokenizer
        )
        self._last = token.item()
        self._sequence[0, n] = self._last
        self._length = n + 1
        if logprobs is not None and raw is not None:
            return scored_tensor(self._last, raw, logprobs)
        return self._last


def _ids(value: Any) -> frozenset[int]:
    return frozenset({value}) if isinstance(value, int) and value >= 0 else frozenset()


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _load_model(exl: Any, path: Path, options: ExLlamaV2Options) -> tuple[Any, Any, Any]:
    if not options.cudnn_attention:
        import torch

        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        config = exl.ExLlamaV2Config(str(path))
    except (ValueError, KeyError, OSError, AssertionError) as exc:
        raise ModelNotFound(f"ExLlamaV2 cannot read the model at {str(path)!r}: {exc}") from None
    if options.max_seq_len is not None:
        config.max_seq_len = options.max_seq_len
    config.arch_compat_overrides()
    model = exl.ExLlamaV2(config)
    cache_class = getattr(exl, _CACHE_CLASSES[options.cache_type])
    if options.autosplit:
        cache = cache_class(model, max_seq_len=config.max_seq_len, lazy=True)
        model.load_autosplit(cache)
    else:
        model.load(list(options.gpu_split) if options.gpu_split else None)
        cache = cache_class(model, max_seq_len=config.max_seq_len)
    tokenizer = exl.ExLlamaV2Tokenizer(config)
    logger.info("loaded %s with a %s cache of %d tokens", path.name, options.cache_type, config.max_seq_len)
    return model, cache, tokenizer
