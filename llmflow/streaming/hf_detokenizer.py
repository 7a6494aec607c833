"""Incremental detokenization for Hugging Face tokenizers, on top of `tokenizers.DecodeStream`.

`tokenizers` is imported when a detokenizer is made, so `llmflow.streaming` itself stays
standard-library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class DecodeStreamDetokenizer:
    """A `Detokenizer` for a `tokenizers.Tokenizer` (every "fast" Hugging Face tokenizer).

    `DecodeStream` runs the tokenizer's own decoder (byte-level, metaspace, byte fallback) over a
    sliding window and returns None until the text ends in a whole character. Special tokens
    render as nothing, like control tokens in llama.cpp: they structure a turn, they are not text.
    What is still pending at the end (an incomplete character) is decoded on its own by `flush`,
    so it comes out as U+FFFD, as a whole-sequence decode would show it.
    """

    __slots__ = ("_tokenizer", "_stream", "_pending", "_decode")

    def __init__(self, tokenizer: Any, decode: Callable[[Sequence[int]], str]):
        from tokenizers.decoders import DecodeStream

        self._tokenizer = tokenizer
        self._stream = DecodeStream(skip_special_tokens=True)
        self._pending: list[int] = []
        self._decode = decode

    def step(self, token_id: int) -> str | None:
        text = self._stream.step(self._tokenizer, token_id)
        if text:
            self._pending.clear()
            return text
        self._pending.append(token_id)
        return None

    def flush(self) -> str | None:
        if not self._pending:
            return None
        text = self._decode(self._pending)
        self._pending = []
        return text or None


class OffsetDetokenizer:
    """A `Detokenizer` for tokenizers without a `tokenizers` backend (slow, Python tokenizers).

    TGI's algorithm: decode a short window of tokens before and after the new one and emit the
    difference once it no longer ends in U+FFFD. Costs two small decodes per token.
    """

    __slots__ = ("_decode", "_ids", "_prefix", "_read")

    def __init__(self, decode: Callable[[Sequence[int]], str]):
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0  # start of the context window
        self._read = 0  # tokens already turned into emitted text

    def step(self, token_id: int) -> str | None:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return after[len(before) :]
        return None

    def flush(self) -> str | None:
        if self._read == len(self._ids):
            return None
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        self._read = len(self._ids)
        return after[len(before) :] or None
