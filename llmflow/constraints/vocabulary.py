"""A model's vocabulary as the constraint compiler needs it: every token's bytes. Each engine
builds one from its own tokenizer (`Engine.token_vocabulary`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class TokenVocabulary:
    #: each token's bytes, by id; a special (control) token as its text, e.g. b"<|im_end|>"
    tokens: Sequence[bytes]
    special_ids: frozenset[int]
    #: the tokens that end a generation: allowed once the constraint is complete
    eos_token_ids: frozenset[int]
    #: plain text to token ids, without BOS and without parsing special tokens
    encode: Callable[[bytes], list[int]]
    #: width of a row of logits (some models pad their output layer past the vocabulary)
    n_logits: int = 0

    @property
    def width(self) -> int:
        return max(self.n_logits, len(self.tokens))

    def control_token(self, text: str) -> int | None:
        """The id of the control token spelled `text` (e.g. `<|python_tag|>`), if there is one."""
        return self._control_ids.get(text.encode())

    @cached_property
    def _control_ids(self) -> dict[bytes, int]:
        return {self.tokens[i]: i for i in self.special_ids}
