"""One generation's constraint state: which tokens may come next, and the token that came.

Engines call `mask` (numpy or torch logits, in place) before sampling and `advance` after; once
the constraint is complete only end-of-generation tokens stay allowed, so the stream ends with
`stop`."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.errors import EngineFailed


class TokenMatcher:
    __slots__ = ("_matcher", "_words", "_n_vocab", "_width", "_eos")

    def __init__(self, matcher: Any, vocabulary: TokenVocabulary):
        self._matcher = matcher
        self._n_vocab = len(vocabulary.tokens)
        self._width = vocabulary.width
        self._eos = vocabulary.eos_token_ids
        self._words = np.full((1, (self._n_vocab + 31) // 32), -1, dtype=np.int32)

    def allowed(self) -> np.ndarray:
        """A bool per logit: may this token come next?"""
        from llguidance.numpy import fill_next_token_bitmask

        fill_next_token_bitmask(self._matcher, self._words, 0)
        if self._matcher.is_error():
            raise EngineFailed(f"the output constraint failed: {self._matcher.get_error()}")
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")
        if self._width == bits.size:
            return bits.view(bool)
        allowed = np.zeros(self._width, dtype=bool)
        allowed[: self._n_vocab] = bits[: self._n_vocab].view(bool)
        return allowed

    def allows(self, token: int) -> bool:
        """May `token` come next? A check of one token, far cheaper than `allowed()`."""
        if token in self._eos:
            return self._matcher.is_accepting()
        return self._matcher.validate_tokens([token]) == 1

    def allowed_prefix(self, tokens: list[int]) -> int:
        """How many leading `tokens` the constraint would take in a row from here (none from an
        end-of-generation token on): a speculative draft is cut there before it is verified."""
        end = next((i for i, t in enumerate(tokens) if t in self._eos), len(tokens))
        return int(self._matcher.validate_tokens(tokens[:end])) if end else 0

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """Set the logits of every token the constraint refuses to -inf, in place."""
        np.copyto(logits, -np.inf, where=~self.allowed()[: logits.shape[-1]])
        return logits

    def mask_for_argmax(self, logits: np.ndarray) -> np.ndarray:
        """`mask` for a greedy pick: the logits as they are when the constraint allows their top
        token (the argmax is then the masked argmax), so most steps check one token instead of
        computing the whole mask."""
        return logits if self.allows(int(logits.argmax())) else self.mask(logits)

    def mask_torch(self, logits: Any) -> Any:
        """`mask` for a torch tensor [vocab], on its device."""
        import torch

        refused = torch.from_numpy(~self.allowed()[: logits.shape[-1]]).to(logits.device, non_blocking=True)
        return logits.masked_fill_(refused, float("-inf"))

    def advance(self, token: int) -> None:
        """Take the sampled token (a masked sample is always accepted)."""
        if token in self._eos and self._matcher.is_accepting():
            return
        if not self._matcher.consume_token(token):
            raise EngineFailed(f"the output constraint refused token {token}: {self._matcher.get_error()}")

    @property
    def complete(self) -> bool:
        """Nothing but an end-of-generation token may follow."""
        return self._matcher.is_stopped()
