"""The contract every inference engine implements. Engines produce token ids; everything
about text (UTF-8, stop strings, finish reasons, usage) lives in `llmflow.streaming`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from llmflow.params import SamplingParams
from llmflow.prompts import ChatTemplate
from llmflow.streaming.detokenizer import Detokenizer
from llmflow.types import CancelToken


@runtime_checkable
class Engine(Protocol):
    #: registry name, e.g. "llama_cpp"
    name: ClassVar[str]
    #: True when `generate` may run from several threads at once (a batching engine);
    #: otherwise callers serialise generations
    concurrent: ClassVar[bool]

    @property
    def model_name(self) -> str: ...

    @property
    def max_concurrency(self) -> int:
        """How many generations may run at once (1 unless the engine batches)."""
        ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    def tokenize(self, text: str) -> list[int]:
        """Token ids of a rendered prompt, special tokens parsed, BOS added if the model wants it."""
        ...

    def chat_template(self) -> ChatTemplate | None:
        """The model's own chat template, or None when its files carry none."""
        ...

    def detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer for one generation."""
        ...

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[int]:
        """Yield sampled token ids until the caller stops iterating, `cancel` is raised or the
        context is full. Closing the iterator frees the generation's engine state."""
        ...

    def close(self) -> None:
        """Free the model's memory."""
        ...
