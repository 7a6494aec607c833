"""The contract every inference engine implements. Engines produce token ids; everything
about text (UTF-8, stop strings, finish reasons, usage) lives in `llmflow.streaming`.

`Engine` is a base class: what every engine must provide is abstract, and what callers may ask
of any engine (its pip packages, its thread option, its scheduler stats) has a default here, so
nobody probes an engine with `getattr`. `EngineOptions` is the base of each engine's load
options: unknown keys are refused, and `parse` names each bad one.

`Engine.generate` is the one place that decides a generation's token limit (`max_tokens`, within
the context window) and its seed (the request's, else the engine's `seed` option): it hands the
engine a `TokenRequest`, and the engine only samples (`tokens`). An engine hands back its chat
template as text (`TemplateText`), never a renderer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmflow.constraints.matcher import TokenMatcher
from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.engines.prompt_cache import CacheStats
from llmflow.engines.speculation import SpeculationCounts
from llmflow.errors import InvalidParams, InvalidRequest, UnsupportedInput
from llmflow.media.prompt import ImageCacheStats
from llmflow.params import SamplingParams, problems_from_validation
from llmflow.streaming.detokenizer import Detokenizer
from llmflow.types import CancelToken, Image, PromptReuse, TemplateText

OptionsT = TypeVar("OptionsT", bound="EngineOptions")
#: seeds are 32-bit; a choice's default seed wraps around
SEED_SPACE = 2**32


#: how long an engine stays idle before it computes a next-turn opening: a client that sends its
#: next request at once (a script, an agent's next call) finds it free, not in that pass
OPENING_WAIT_S = 0.1


class EngineOptions(BaseModel):
    """Load-time options of one engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int | None = Field(
        None, ge=0, le=SEED_SPACE - 1, description="default RNG seed of a request that names none"
    )

    @classmethod
    def parse(cls: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise InvalidParams(problems_from_validation(exc)) from None


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One generation as an engine runs it, its limit and seed already decided (`token_request`),
    so that no engine reads `max_tokens` or its own seed option."""

    prompt_ids: Sequence[int]
    #: the request's params; `seed` is the engine's default when the request named none
    params: SamplingParams
    cancel: CancelToken
    #: tokens to yield at most: `max_tokens`, or what is left of the context window
    limit: int
    constraint: TokenMatcher | None = None
    #: where the engine says how many prompt tokens it reused (None: nobody asks)
    reuse: PromptReuse | None = None
    #: the tokens the conversation's next prompt puts after the answer (the chat template's turn
    #: boundary): an engine that keeps the conversation may compute them once it has been
    #: idle for `OPENING_WAIT_S`
    next_turn_opening: Sequence[int] = ()


def next_turn_tokens(
    uncomputed: Sequence[int], eos_token_ids: Collection[int], opening: Sequence[int]
) -> list[int]:
    """What an engine computes while idle for a conversation's next turn: the answer's tokens
    its context does not hold yet (an end-of-generation token left out, as the next prompt spells
    the end of the answer with the template's boundary), then the template's opening."""
    rest = list(uncomputed)
    if rest and rest[-1] in eos_token_ids:
        rest.pop()
    return rest + list(opening)


def token_request(
    prompt_ids: Sequence[int],
    params: SamplingParams,
    cancel: CancelToken,
    n_ctx: int,
    constraint: TokenMatcher | None = None,
    *,
    default_seed: int | None = None,
    choice: int = 0,
    reuse: PromptReuse | None = None,
    next_turn_opening: Sequence[int] = (),
) -> TokenRequest:
    """The request for one generation (choice `choice` of a group: a default seed one apart per
    choice, as `llmflow.choices` does for a request's own seed)."""
    if params.seed is None and default_seed is not None:
        params = params.model_copy(update={"seed": (default_seed + choice) % SEED_SPACE})
    limit = min(params.max_tokens, n_ctx - len(prompt_ids))
    return TokenRequest(prompt_ids, params, cancel, limit, constraint, reuse, next_turn_opening)


class Engine(ABC):
    #: registry name, e.g. "llama_cpp"
    name: ClassVar[str]
    #: True when `generate` may run from several threads at once (a batching engine);
    #: otherwise callers serialise generations
    concurrent: ClassVar[bool] = False
    #: what a logged model pins in its pip requirements (see llmflow.mlflow.requirements)
    pip_packages: ClassVar[tuple[str, ...]] = ()
    #: the load option that sets CPU threads, if any (see llmflow.mlflow.worker_cache: threads per
    #: Spark task)
    thread_option: ClassVar[str | None] = None
    #: True when the token iterators wait on a mailbox that a scheduler thread fills
    #: (`llmflow.engines.handoff`): a server then reads them on its event loop, no thread each
    pushes_tokens: ClassVar[bool] = False
    #: True when `generate` yields `ScoredToken`s for params with `logprobs` set
    scores_tokens: ClassVar[bool] = False
    #: the LoRA adapters it loads: "gguf" (a GGUF adapter file, llama.cpp's), "peft" (a PEFT
    #: adapter directory); None: none (see `load_adapter`)
    lora_format: ClassVar[Literal["gguf", "peft"] | None] = None
    #: the load option that names a vision model's projector file (a Hub model's or a logged
    #: model's projector goes there, see `llmflow.model_files.projector_of`); None: the engine
    #: reads images without one, or none at all
    projector_option: ClassVar[str | None] = None
    #: the validated load options (an engine sets its own; `seed` is every engine's default seed)
    options: EngineOptions = EngineOptions()

    @classmethod
    @abstractmethod
    def load(cls, model_path: str | Path, **options: Any) -> Engine:
        """Load a model; `options` are this engine's load options, validated here."""

    @property
    @abstractmethod
    def model_name(self) -> str: ...

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """What the loaded model reads (`text`, `image`, `audio`): what `/v1/models` lists, and
        what a request may hold (an image for a model without `image` is refused)."""
        return ("text",)

    @property
    def max_concurrency(self) -> int:
        """How many generations may run at once (1 unless the engine batches)."""
        return 1

    @property
    @abstractmethod
    def n_ctx(self) -> int: ...

    @property
    @abstractmethod
    def eos_token_ids(self) -> frozenset[int]: ...

    @abstractmethod
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`. By default (a rendered prompt) special tokens written in the text
        are parsed and BOS is added if the model wants it (and the text does not start with it);
        `add_special=False` adds nothing, `parse_special=False` reads special-token text as text."""

    @property
    def image_marker(self) -> str | None:
        """How a chat template sees an image: None, Hugging Face's typed part `{"type": "image"}`
        (which a vision model's template and processor expand); a string, that text in the
        message's content, which `tokenize_prompt` turns into the image's positions (llama.cpp's
        media marker)."""
        return None

    def tokenize_prompt(self, text: str, images: Sequence[Image]) -> Sequence[int]:
        """The rendered prompt's ids with its images in place (`llmflow.media.prompt.MediaPrompt`,
        an image's span evaluated whole); without images, `tokenize(text)`. An engine that reads
        images overrides this; the others are never given any (`LLM` refuses them first)."""
        if images:
            raise UnsupportedInput(images[0].field, f"the {self.name} engine reads no images")
        return self.tokenize(text)

    @property
    @abstractmethod
    def n_vocab(self) -> int:
        """How many token ids the model has (ids are 0..n_vocab-1)."""

    @abstractmethod
    def token_piece(self, token_id: int) -> bytes:
        """One token's bytes, special tokens as their text (`<|im_end|>`): what /tokenize shows
        and a logprob's `bytes` are. Part of a character for byte tokens."""

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, special tokens as their text; broken UTF-8 as U+FFFD."""
        return b"".join(self.token_piece(t) for t in token_ids).decode("utf-8", errors="replace")

    @abstractmethod
    def template_text(self) -> TemplateText:
        """The model's own chat template and special tokens, as its files carry them."""

    @abstractmethod
    def detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer for one generation."""

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        constraint: TokenMatcher | None = None,
        reuse: PromptReuse | None = None,
        next_turn_opening: Sequence[int] = (),
    ) -> Iterator[int]:
        """Yield sampled token ids until the caller stops iterating, `cancel` is raised, `max_tokens`
        are out or the context is full. Closing the iterator frees the generation's engine state.
        `reuse` hears how many prompt tokens came from a cache (an engine with none leaves it 0);
        `next_turn_opening`: see `TokenRequest`.

        With a `constraint`, every token is sampled from logits masked by
        `constraint.allowed()` (greedy too: the masked argmax) and passed to
        `constraint.advance` before the next one is sampled."""
        request = token_request(
            prompt_ids,
            params,
            cancel,
            self.n_ctx,
            constraint,
            default_seed=self.options.seed,
            reuse=reuse,
            next_turn_opening=next_turn_opening,
        )
        return self.tokens(request) if request.limit > 0 else iter(())

    def generate_group(
        self,
        prompt_ids: Sequence[int],
        params: Sequence[SamplingParams],
        cancel: CancelToken,
        constraints: Sequence[TokenMatcher | None] | None = None,
        reuse: PromptReuse | None = None,
        next_turn_opening: Sequence[int] = (),
    ) -> list[Iterator[int]]:
        """Several answers to one prompt (OpenAI's `n`), one token iterator each. `constraints`:
        one matcher per choice (never shared: each holds its own choice's state), or None.
        `reuse` hears the first choice's reused prompt tokens (the others copy its prompt)."""
        matchers = list(constraints) if constraints is not None else [None] * len(params)
        if len(matchers) != len(params):
            raise ValueError("one constraint (or None) per choice")
        n_ctx, seed = self.n_ctx, self.options.seed
        requests = [
            token_request(
                prompt_ids,
                p,
                cancel,
                n_ctx,
                c,
                default_seed=seed,
                choice=i,
                reuse=reuse if i == 0 else None,
                next_turn_opening=next_turn_opening,
            )
            for i, (p, c) in enumerate(zip(params, matchers, strict=True))
        ]
        if n_ctx - len(prompt_ids) <= 0:
            return [iter(()) for _ in requests]
        return self.token_group(requests)

    @abstractmethod
    def tokens(self, request: TokenRequest) -> Iterator[int]:
        """Sample the generation `request` describes: at most `request.limit` token ids (at least
        one is asked for), checking `request.cancel` between two tokens; an engine may also end
        at an end-of-generation token. Finish reasons and text are the streaming core's."""

    def token_group(self, requests: Sequence[TokenRequest]) -> list[Iterator[int]]:
        """One iterator per choice of one prompt. By default independent generations: an engine
        that decodes one at a time runs them in turn (read them one after the other); a batching
        engine shares the computed prompt."""
        return [self.tokens(r) if r.limit > 0 else iter(()) for r in requests]

    def token_vocabulary(self) -> TokenVocabulary | None:
        """Every token's bytes, for output constraints; None: this engine cannot constrain its
        output (a request with a constraint is then refused)."""
        return None

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """One pooled vector per input (token ids), not normalised; an engine or model that cannot
        pool token states refuses with an `InvalidRequest` naming `model`."""
        raise InvalidRequest.single("model", f"the {self.name} engine does not make embeddings")

    @property
    def lora_names(self) -> tuple[str, ...]:
        """The LoRA adapters loaded (see `engines/lora.py`); none by default."""
        return ()

    def check_adapter(self, name: str) -> None:
        """Refuse a request for adapter `name` that this engine cannot apply (before any token)."""
        raise InvalidParams.single("lora", f"the {self.name} engine does not apply LoRA adapters")

    def load_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter (a file or directory, as `lora_format` says) as `name`, while the
        model stays loaded."""
        raise InvalidParams.single("lora", f"the {self.name} engine does not apply LoRA adapters")

    def unload_adapter(self, name: str) -> None:
        raise InvalidParams.single("lora", f"the {self.name} engine does not apply LoRA adapters")

    def stats(self) -> Any | None:
        """Scheduler numbers for the server's metrics (a batching engine); None otherwise."""
        return None

    def cache_stats(self) -> CacheStats | None:
        """What the prompt cache's tiers hold (bytes, entries); None: the engine has none."""
        return None

    def next_turn_tokens_computed(self) -> int | None:
        """Tokens computed while idle after answers, for their conversations' next turns (the
        `next_turn_opening` option); None: the engine computes none."""
        return None

    def image_stats(self) -> ImageCacheStats | None:
        """Images encoded and reused from its cache of encoded images; None: it reads none."""
        return None

    def speculation_stats(self) -> SpeculationCounts | None:
        """Speculative draft tokens proposed and accepted so far; None: the engine does not
        speculate."""
        return None

    def persist(self) -> None:
        """Save what the engine keeps of its conversations to a prompt cache that outlives the
        process, and wait until it is written (a server's shutdown); nothing by default."""
        return None

    def memory_bytes(self) -> int | None:
        """What the loaded model holds, estimated (weights as loaded, the KV cache as allocated;
        see `engines/memory.py`): what a server's `--max-memory` counts. None: cannot tell."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Free the model's memory."""
