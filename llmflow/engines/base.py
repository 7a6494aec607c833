"""The contract every inference engine implements. Engines produce token ids; everything
about text (UTF-8, stop strings, finish reasons, usage) lives in `llmflow.streaming`.

`Engine` is a base class: what every engine must provide is abstract, and what callers may ask
of any engine (its pip packages, its thread option, its scheduler stats) has a default here, so
nobody probes an engine with `getattr`. `EngineOptions` is the base of each engine's load
options: unknown keys are refused, and `parse` names each bad one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from llmflow.constraints.matcher import TokenMatcher
from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.errors import InvalidParams
from llmflow.params import SamplingParams, problems_from_validation
from llmflow.prompts import ChatTemplate
from llmflow.streaming.detokenizer import Detokenizer
from llmflow.types import CancelToken

OptionsT = TypeVar("OptionsT", bound="EngineOptions")


class EngineOptions(BaseModel):
    """Load-time options of one engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def parse(cls: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise InvalidParams(problems_from_validation(exc)) from None


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

    @classmethod
    @abstractmethod
    def load(cls, model_path: str | Path, **options: Any) -> Engine:
        """Load a model; `options` are this engine's load options, validated here."""

    @property
    @abstractmethod
    def model_name(self) -> str: ...

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
    def tokenize(self, text: str) -> list[int]:
        """Token ids of a rendered prompt, special tokens parsed, BOS added if the model wants it."""

    @abstractmethod
    def chat_template(self) -> ChatTemplate | None:
        """The model's own chat template, or None when its files carry none."""

    @abstractmethod
    def detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer for one generation."""

    @abstractmethod
    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        constraint: TokenMatcher | None = None,
    ) -> Iterator[int]:
        """Yield sampled token ids until the caller stops iterating, `cancel` is raised or the
        context is full. Closing the iterator frees the generation's engine state.

        With a `constraint`, every token is sampled from logits masked by
        `constraint.allowed()` (greedy too: the masked argmax) and passed to
        `constraint.advance` before the next one is sampled."""

    def token_vocabulary(self) -> TokenVocabulary | None:
        """Every token's bytes, for output constraints; None: this engine cannot constrain its
        output (a request with a constraint is then refused)."""
        return None

    def stats(self) -> Any | None:
        """Scheduler numbers for the server's metrics (a batching engine); None otherwise."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Free the model's memory."""
