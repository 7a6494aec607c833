"""Incremental detokenization: token ids in, whole characters out."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Protocol


class Detokenizer(Protocol):
    """Turns a stream of token ids into text, one step per token.

    `step` returns the new text, or None while no complete character is available yet: it never
    returns an empty string and never part of a character. `flush` returns what is left at the end.
    The concatenation of every returned piece equals the decode of the whole token sequence.
    """

    def step(self, token_id: int) -> str | None: ...

    def flush(self) -> str | None: ...


class ByteDetokenizer:
    """For engines that give each token's bytes (llama.cpp): an incremental UTF-8 decoder.

    Bytes that can never form valid UTF-8 become U+FFFD, exactly as `bytes.decode(errors="replace")`
    would; an incomplete character is held until its last byte arrives.
    """

    __slots__ = ("_piece", "_decode")

    def __init__(self, piece: Callable[[int], bytes]):
        self._piece = piece
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode

    def step(self, token_id: int) -> str | None:
        return self._decode(self._piece(token_id)) or None

    def flush(self) -> str | None:
        return self._decode(b"", True) or None
