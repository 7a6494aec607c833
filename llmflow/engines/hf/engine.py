"""The transformers engine: Hugging Face model directories (config.json, safetensors, tokenizer)
on the CPU or a CUDA GPU. A vision-language model's directory (image-text-to-text) loads with its
processor, and its prompts may hold images (`llmflow.engines.hf.vision`)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.engines.base import Engine, TokenRequest
from llmflow.engines.encoded_images import EncodedImages
from llmflow.engines.hf.adapters import PeftAdapters
from llmflow.engines.hf.options import Placement, TransformersOptions, resolve
from llmflow.engines.hf.vision import VisionInputs, is_vision_model, why_no_images
from llmflow.engines.lora import adapter_key, with_adapters
from llmflow.errors import EngineUnavailable, InvalidParams, InvalidRequest, ModelNotFound, UnsupportedInput
from llmflow.media.prompt import media_images
from llmflow.streaming.detokenizer import Detokenizer
from llmflow.types import Image, TemplateText

log = logging.getLogger(__name__)

STATIC_CACHE_DEFAULT_CTX = 4096
INSTALL_HINT = "pip install 'llmflow[transformers]'"


class TransformersEngine(Engine):
    """A causal LM and its tokenizer (a vision-language model: and its processor). One stream at
    a time on llmflow's own decode loop, or many at once through transformers' continuous
    batching (`continuous_batching=True`, text only)."""

    name: ClassVar[str] = "transformers"
    pip_packages: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    concurrent: bool = False  # True on an instance that batches
    #: llmflow's own decode loop scores tokens; under continuous batching `hf.rescoring` does
    scores_tokens: ClassVar[bool] = True
    lora_format: ClassVar[Literal["gguf", "peft"] | None] = "peft"

    def __init__(
        self, model: Any, tokenizer: Any, options: TransformersOptions, model_name: str, processor: Any = None
    ):
        self._model = model
        self._processor = processor
        self._tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self.options = options
        self._name = model_name
        self.placement: Placement = resolve(options)
        self._eos = frozenset() if options.ignore_eos else _eos_token_ids(model, tokenizer)
        self._bos_text = tokenizer.bos_token or ""
        self._add_special = _adds_special_tokens(tokenizer)
        self._n_ctx = _context_window(model, options, self.placement)
        self._runner: Any = None
        self._batcher: Any = None
        self._adapters = PeftAdapters(model)
        self._vision = _vision_inputs(model, processor, options, model_name)
        if options.continuous_batching:
            self._start_batching()
        else:
            self._runner = self._make_runner()

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> TransformersEngine:
        parsed = TransformersOptions.parse(options)
        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"no Hugging Face model directory (with config.json) at {str(path)!r}")
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise EngineUnavailable(
                f"the transformers engine needs torch and transformers ({INSTALL_HINT}): {exc}"
            ) from None
        placement = resolve(parsed)
        if parsed.lora:
            _check_adapters_allowed(parsed, placement)
        extra = {"attn_implementation": parsed.attn_implementation} if parsed.attn_implementation else {}
        remote = parsed.trust_remote_code
        processor = None
        try:
            if is_vision_model(path):
                from transformers import AutoModelForImageTextToText, AutoProcessor

                processor = AutoProcessor.from_pretrained(path, trust_remote_code=remote)
                tokenizer = processor.tokenizer
                auto: Any = AutoModelForImageTextToText
            else:
                tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=remote)
                auto = AutoModelForCausalLM
            model = auto.from_pretrained(path, dtype=placement.dtype, trust_remote_code=remote, **extra)
        except (OSError, ValueError, ImportError) as exc:
            raise ModelNotFound(f"transformers could not load {str(path)!r}: {exc}") from None
        model.to(placement.device).eval()
        return with_adapters(cls(model, tokenizer, parsed, path.name, processor), parsed.lora)

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, *, model_name: str = "model", **options: Any
    ) -> TransformersEngine:
        """Wrap a model already in memory (built in code, say). It is moved to the resolved device
        and dtype."""
        parsed = TransformersOptions.parse(options)
        placement = resolve(parsed)
        model.to(device=placement.device, dtype=placement.dtype).eval()
        return cls(model, tokenizer, parsed, model_name)

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """Images too for a vision-language model on llmflow's own decode loop (continuous
        batching takes token ids alone)."""
        return ("text", "image") if self._vision is not None and self._batcher is None else ("text",)

    @property
    def encoded_images(self) -> EncodedImages[Any] | None:
        """A vision model's encoded images kept by hash (their hits and misses); None otherwise."""
        return None if self._vision is None else self._vision.encoded

    @property
    def max_concurrency(self) -> int:
        return self.options.max_concurrency if self._batcher is not None else 1

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def model(self) -> Any:
        return self._model

    @property
    def lora_names(self) -> tuple[str, ...]:
        return self._adapters.names

    def check_adapter(self, name: str) -> None:
        self._adapters.check(name)

    def load_adapter(self, name: str, path: str) -> None:
        _check_adapters_allowed(self.options, self.placement)
        self._adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        self._adapters.unload(name)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        add = add_special and self._adds_special(text)
        if self._backend is not None and parse_special:
            return self._backend.encode(text, add_special_tokens=add).ids
        return self._tokenizer.encode(text, add_special_tokens=add, split_special_tokens=not parse_special)

    def _adds_special(self, text: str) -> bool:
        """Whether a rendered prompt gets the model's BOS (it wants one, and the text has none)."""
        return self._add_special and not (self._bos_text and text.startswith(self._bos_text))

    def tokenize_prompt(self, text: str, images: Sequence[Image]) -> Sequence[int]:
        if not images or self._vision is None:
            return super().tokenize_prompt(text, images)
        if self._batcher is not None:
            raise _batching_refuses(images[0].field)
        return self._vision.tokenize(text, images, add_special=self._adds_special(text))

    @property
    def n_vocab(self) -> int:
        return len(self._tokenizer)

    def token_piece(self, token_id: int) -> bytes:
        """The token decoded on its own: a byte token that is part of a character comes out as
        U+FFFD (transformers has no public bytes-of-a-token call for every tokenizer)."""
        return self._tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def template_text(self) -> TemplateText:
        source = self._tokenizer.chat_template
        if not source and self._processor is not None:  # a vision model's template is its processor's
            source = self._processor.chat_template
        if isinstance(source, dict):  # several named templates: the default one
            source = source.get("default")
        eos_text = self._tokenizer.eos_token or ""
        return TemplateText(source or None, bos_token=self._bos_text, eos_token=eos_text)

    def detokenizer(self) -> Detokenizer:
        from llmflow.streaming.hf_detokenizer import DecodeStreamDetokenizer, OffsetDetokenizer

        if self._backend is not None:
            backend = self._backend
            return DecodeStreamDetokenizer(backend, lambda ids: backend.decode(ids, skip_special_tokens=True))
        tokenizer = self._tokenizer
        return OffsetDetokenizer(lambda ids: tokenizer.decode(ids, skip_special_tokens=True))

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        if self._batcher is None:
            return self._decode(request)
        images = media_images(request.prompt_ids)
        if images:  # transformers' manager takes token ids alone
            raise _batching_refuses(images[0].image.field)
        if request.constraint is not None:  # transformers' manager samples inside; nothing to mask
            raise InvalidRequest.single(
                "constraint",
                "output constraints need the transformers engine without continuous_batching",
            )
        tokens = self._batcher.generate(request.prompt_ids, request.params, request.limit, request.cancel)
        if request.params.logprobs is None:
            return tokens
        from llmflow.engines.hf.rescoring import rescored

        return rescored(self._model, request.prompt_ids, tokens, request.params.logprobs)

    def token_vocabulary(self) -> TokenVocabulary | None:
        """None with continuous batching (transformers' manager samples; nothing to mask) or a
        slow (Python) tokenizer (no byte-level vocabulary)."""
        if self._backend is None or self._batcher is not None:
            return None
        return _hf_vocabulary(self._backend, self._eos, self._model)

    def memory_bytes(self) -> int | None:
        """Parameters, buffers and the KV cache at its largest: `n_ctx` tokens for the decode
        loop, every cache block under continuous batching (see `engines/memory.py`)."""
        if self._model is None:
            return None
        from llmflow.engines.memory import torch_bytes

        setup = self.batching_setup() if self._batcher is not None else None
        kv_tokens = setup.cache_blocks() * setup.page_size if setup is not None else self._n_ctx
        return torch_bytes(self._model, kv_tokens)

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()
            self._batcher = None
        self._runner = None
        self._model = None
        gc.collect()
        if self.placement.on_cuda:
            import torch

            torch.cuda.empty_cache()

    def _decode(self, request: TokenRequest) -> Iterator[int]:
        """llmflow's own decode loop, computing with the request's adapter from the first token to
        the last (no adapter loads or unloads meanwhile)."""
        from llmflow.engines.hf.decode import as_prompt, decode_tokens
        from llmflow.engines.hf.sampling import Sampler

        with self._adapters.using(adapter_key(request.params.lora, request.params.lora_scale)):
            embeds = None
            if self._vision is not None and media_images(request.prompt_ids):
                prompt, embeds = self._vision.prompt_inputs(request.prompt_ids, self.placement.device)
            else:
                prompt = as_prompt(request.prompt_ids, self.placement.device)
            sampler = Sampler(request.params, prompt[0], request.limit, request.constraint)
            yield from decode_tokens(
                self._runner,
                sampler,
                prompt,
                request.limit,
                request.cancel,
                pipelined=self.placement.on_cuda,
                logprobs=request.params.logprobs,
                embeds=embeds,
            )

    def _make_runner(self) -> Any:
        from llmflow.engines.hf.decode import DynamicRunner, StaticRunner

        placement = self.placement
        if not placement.static_cache:
            return DynamicRunner(self._model)
        runner = StaticRunner(
            self._model, self._n_ctx, compile=placement.torch_compile, cuda_graphs=placement.cuda_graphs
        )
        if self.options.warmup:
            runner.warmup(placement.device)
        return runner

    def _start_batching(self) -> None:
        from llmflow.engines.hf.batching import ContinuousBatcher

        self._batcher = ContinuousBatcher(
            self._model,
            sorted(self._eos),
            self.batching_setup(),
            warmup=self.options.warmup and self.placement.on_cuda,
        )
        self.concurrent = True

    def batching_setup(self) -> Any:
        from llmflow.engines.hf.batching import BatchingSetup

        options = self.options
        return BatchingSetup(
            max_concurrency=options.max_concurrency,
            max_sequence=self._n_ctx,
            max_batch_tokens=options.max_batch_tokens or (8192 if self.placement.on_cuda else 512),
            max_memory_percent=options.max_memory_percent,
            seed=options.seed,
            sampling=options.batch_sampling,
            page_size=options.batch_page_size,
        )


def _vision_inputs(
    model: Any, processor: Any, options: TransformersOptions, model_name: str
) -> VisionInputs | None:
    """How a vision-language model reads images; None for a text model, or (logged) one whose
    images cannot reach it here: it then serves text."""
    if processor is None:
        return None
    reason = why_no_images(model, processor)
    if reason is not None:
        log.warning("%s reads text only here: %s", model_name, reason)
        return None
    if options.continuous_batching:
        log.warning("%s reads text only under continuous batching, which takes token ids alone", model_name)
    return VisionInputs(model, processor, options.image_cache_mib << 20)


def _batching_refuses(field: str) -> UnsupportedInput:
    return UnsupportedInput(
        field,
        "continuous batching (continuous_batching) reads no images; load the model without it for images",
    )


def _check_adapters_allowed(options: TransformersOptions, placement: Placement) -> None:
    """LoRA adapters switch per request in llmflow's own decode loop; transformers' continuous
    batching and a compiled decode step would compute every request with one of them."""
    if options.continuous_batching or placement.torch_compile:
        raise InvalidParams.single(
            "lora", "LoRA adapters need the transformers engine without continuous_batching and torch_compile"
        )


def _hf_vocabulary(backend: Any, eos: frozenset[int], model: Any) -> TokenVocabulary:
    """From the fast tokenizer's own JSON; the logits' width is the model's output size."""
    import json

    from llmflow.engines.hf_files import token_vocabulary

    width = int(model.get_output_embeddings().weight.shape[0])

    def encode(text: bytes) -> list[int]:
        return backend.encode(text.decode("utf-8", errors="replace"), add_special_tokens=False).ids

    return token_vocabulary(json.loads(backend.to_str()), eos, encode, width)


def _eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every id that ends a turn: the generation config's (often a list: <|eot_id|>, <|end_of_text|>)
    and the tokenizer's."""
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return frozenset(i for i in ids if i >= 0)


def _adds_special_tokens(tokenizer: Any) -> bool:
    """Whether encoding adds BOS (or other specials) around the text, as the model was trained."""
    probe = "a"
    return tokenizer.encode(probe, add_special_tokens=True) != tokenizer.encode(
        probe, add_special_tokens=False
    )


def _context_window(model: Any, options: TransformersOptions, placement: Placement) -> int:
    config = model.config.get_text_config()
    model_max = getattr(config, "max_position_embeddings", None) or STATIC_CACHE_DEFAULT_CTX
    if options.n_ctx is not None:
        return options.n_ctx
    if placement.static_cache or options.continuous_batching:
        return min(model_max, STATIC_CACHE_DEFAULT_CTX)
    return model_max
