"""Tokenizing a prompt fragment by fragment, remembering the fragments seen.

Chat apps and agents resend the whole conversation every turn, and tokenizing it again costs a
few milliseconds per thousand tokens (a 30k-token session: about 80 ms a turn on a small CPU).
llama.cpp's byte-level BPE tokenizer splits a text at its special tokens first and tokenizes the
text between two of them on its own, so a turn's earlier messages are fragments already seen:
they are looked up, and only the new ones are tokenized.

This is llama.cpp's own result only where its split is unambiguous: no special token's text
overlaps another's and none strips the whitespace beside it. `FragmentTokenizer.of` returns None
otherwise, and the caller tokenizes the whole text.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping

#: fragments remembered, in bytes of text and tokens: a few hundred long conversations
BUDGET = 16 << 20


class FragmentTokenizer:
    """Special tokens by their text; the rest through `tokenize_raw` (a fragment with no special
    token in it, no BOS or EOS added), remembered up to `budget_bytes` (its text and its tokens,
    4 bytes each)."""

    def __init__(
        self,
        specials: Mapping[bytes, int],
        tokenize_raw: Callable[[bytes], list[int]],
        budget_bytes: int = BUDGET,
    ):
        self._specials = dict(specials)
        longest_first = sorted(self._specials, key=len, reverse=True)
        self._split = re.compile(b"(" + b"|".join(re.escape(text) for text in longest_first) + b")")
        self._tokenize_raw = tokenize_raw
        self._budget = budget_bytes
        self._seen: OrderedDict[bytes, array[int]] = OrderedDict()
        self._seen_bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def of(
        cls, specials: Mapping[bytes, int], tokenize_raw: Callable[[bytes], list[int]], budget: int = BUDGET
    ) -> FragmentTokenizer | None:
        """A fragment tokenizer where splitting at `specials` is unambiguous, else None."""
        if not specials or b"" in specials or overlapping(list(specials)):
            return None
        return cls(specials, tokenize_raw, budget)

    def tokenize(self, text: bytes) -> list[int]:
        """The tokens of `text` with its special tokens parsed, nothing added around it."""
        tokens: list[int] = []
        for i, part in enumerate(self._split.split(text)):
            if i % 2:
                tokens.append(self._specials[part])
            elif part:
                tokens.extend(self._fragment(part))
        return tokens

    def _fragment(self, part: bytes) -> array[int]:
        with self._lock:
            seen = self._seen.get(part)
            if seen is not None:
                self._seen.move_to_end(part)
                return seen
        tokens = array("i", self._tokenize_raw(part))
        size = len(part) + 4 * len(tokens)
        if size <= self._budget:
            with self._lock:
                if part not in self._seen:
                    self._seen[part] = tokens
                    self._seen_bytes += size
                while self._seen_bytes > self._budget:
                    oldest, dropped = self._seen.popitem(last=False)
                    self._seen_bytes -= len(oldest) + 4 * len(dropped)
        return tokens


def overlapping(texts: list[bytes]) -> bool:
    """Whether one text holds another, or ends with another's beginning: llama.cpp then splits
    by the longest text first, which a single left-to-right split need not match."""
    beginnings = {text[:k] for text in texts for k in range(1, len(text))}
    for text in texts:
        if any(text[k:] in beginnings for k in range(1, len(text))):
            return True
        if any(other != text and other in text for other in texts):
            return True
    return False
