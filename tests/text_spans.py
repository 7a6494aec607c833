"""Inputs built from whatever the model answered, so tests hold for every llama.cpp build."""

from __future__ import annotations

from typing import Any


def decode(engine: Any, ids: list[int]) -> str:
    detokenizer = engine.detokenizer()
    parts = [detokenizer.step(token) for token in ids]
    parts.append(detokenizer.flush())
    return "".join(part for part in parts if part)


def token_span(engine: Any, text: str, start: int, count: int = 3) -> str:
    """The text of `count` consecutive tokens of `text`, from token `start` on (or the first later
    place where those tokens hold whole characters): a substring that spans several tokens, found
    in the answer itself rather than guessed from one machine's greedy text."""
    ids = engine.tokenize(text)
    for first in range(start, len(ids) - count + 1):
        before = decode(engine, ids[:first])
        span = decode(engine, ids[: first + count])[len(before) :]
        if "\ufffd" not in before + span and span.strip() and span in text:
            return span
    raise AssertionError(f"no {count} tokens from token {start} on hold whole characters: {text!r}")
