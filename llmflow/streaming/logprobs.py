"""Logprobs in text: a scored token id (see `llmflow.types.ScoredToken`) as the token's text and
bytes, for the chunk whose text it made."""

from __future__ import annotations

from collections.abc import Callable

from llmflow.types import TokenLogprob, TopLogprob

#: a token id's bytes, special tokens as their text
TokenPiece = Callable[[int], bytes]


def describe(token_id: int, piece: TokenPiece) -> TokenLogprob:
    """The logprob record of a token an engine yielded (a `ScoredToken`; a plain id, from an
    engine that cannot score, is an error)."""
    try:
        logprob, top = token_id.logprob, token_id.top  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError("the engine yielded a token without its logprob") from None
    data = piece(token_id)
    alternatives = tuple(_top(t, lp, piece) for t, lp in top)
    return TokenLogprob(data.decode("utf-8", errors="replace"), data, logprob, alternatives)


def _top(token_id: int, logprob: float, piece: TokenPiece) -> TopLogprob:
    data = piece(token_id)
    return TopLogprob(data.decode("utf-8", errors="replace"), data, logprob)
