"""Turns an engine's token ids into chunks: text, stop strings, max_tokens, finish and usage.

This is written once for every engine; engines only produce token ids.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from llmflow.streaming.detokenizer import Detokenizer
from llmflow.streaming.stops import StopMatcher
from llmflow.types import CancelToken, Chunk, FinishReason, Usage


def stream_chunks(
    tokens: Iterator[int],
    detokenizer: Detokenizer,
    *,
    stop: tuple[str, ...],
    max_tokens: int,
    eos_token_ids: Collection[int],
    prompt_tokens: int,
    cancel: CancelToken | None = None,
) -> Iterator[Chunk]:
    """Yield non-empty text chunks, then one final chunk with the finish reason and usage.

    `tokens` is closed as soon as the stream ends for any reason, including the consumer closing
    this generator, so the engine frees its state between two tokens.
    """
    stops = StopMatcher(stop)
    generated = 0
    stopped_on_string = False
    finish = FinishReason.LENGTH  # the engine ran out of context unless something else ends it
    try:
        for token_id in tokens:
            if cancel is not None and cancel.cancelled:
                finish = FinishReason.CANCELLED
                break
            generated += 1
            if token_id in eos_token_ids:
                finish = FinishReason.STOP
                break
            piece = detokenizer.step(token_id)
            if piece is not None:
                text, stopped_on_string = stops.feed(piece)
                if text:
                    yield Chunk(text)
                if stopped_on_string:
                    finish = FinishReason.STOP
                    break
            if generated >= max_tokens:
                break
        else:  # the engine stopped by itself: it saw the cancel, or the context is full
            if cancel is not None and cancel.cancelled:
                finish = FinishReason.CANCELLED
    finally:
        close = getattr(tokens, "close", None)
        if close is not None:
            close()
    if not stopped_on_string:
        # Only a model that ended its answer may end on a broken character; a stream cut short
        # (length, cancel) drops the bytes of a character it did not finish.
        tail, stopped_on_string = _flush(detokenizer if finish is FinishReason.STOP else None, stops)
        if tail:
            yield Chunk(tail)
        if stopped_on_string:
            finish = FinishReason.STOP
    yield Chunk("", finish, Usage(prompt_tokens, generated))


def _flush(detokenizer: Detokenizer | None, stops: StopMatcher) -> tuple[str, bool]:
    """Text still pending at the end (an incomplete character, a held stop prefix), and
    whether it completed a stop string."""
    rest = detokenizer.flush() if detokenizer is not None else None
    if rest:
        emitted, stopped = stops.feed(rest)
        if stopped:
            return emitted, True
        return emitted + stops.flush(), False
    return stops.flush(), False
