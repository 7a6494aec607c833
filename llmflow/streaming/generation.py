"""Turns an engine's token ids into chunks: text, stop strings, max_tokens, finish and usage.

This is written once for every engine; engines only produce token ids.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from llmflow.streaming.detokenizer import Detokenizer
from llmflow.streaming.logprobs import TokenPiece, describe
from llmflow.streaming.reasoning import ReasoningSplitter
from llmflow.streaming.stops import StopMatcher
from llmflow.types import CancelToken, Chunk, FinishReason, PromptReuse, TokenLogprob, Usage


def stream_chunks(
    tokens: Iterator[int],
    detokenizer: Detokenizer,
    *,
    stop: tuple[str, ...],
    max_tokens: int,
    eos_token_ids: Collection[int],
    prompt_tokens: int,
    cancel: CancelToken | None = None,
    reasoning: ReasoningSplitter | None = None,
    logprobs: TokenPiece | None = None,
    reuse: PromptReuse | None = None,
) -> Iterator[Chunk]:
    """Yield non-empty text chunks, then one final chunk with the finish reason and usage.

    With `reasoning`, a reasoning model's thinking comes in chunks of its own (`Chunk.reasoning`),
    split after stop strings are cut. With `logprobs` (a token's bytes), the engine yields
    `ScoredToken`s and each chunk carries the logprobs of the tokens generated since the chunk
    before it (the end-of-generation token's is left out). `reuse`: the engine's count of prompt
    tokens taken from a cache, read into the usage when the stream ends.

    `tokens` is closed as soon as the stream ends for any reason, including the consumer closing
    this generator, so the engine frees its state between two tokens.
    """
    stops = StopMatcher(stop)
    generated = 0
    stopped_on_string = False
    finish = FinishReason.LENGTH  # the engine ran out of context unless something else ends it
    plain = reasoning is None and logprobs is None
    scored: list[TokenLogprob] = []
    try:
        for token_id in tokens:
            if cancel is not None and cancel.cancelled:
                finish = FinishReason.CANCELLED
                break
            generated += 1
            if token_id in eos_token_ids:
                finish = FinishReason.STOP
                break
            if logprobs is not None:
                scored.append(describe(token_id, logprobs))
            piece = detokenizer.step(token_id)
            if piece is not None:
                text, stopped_on_string = stops.feed(piece)
                if text:
                    if plain:
                        yield Chunk(text)
                    else:
                        yield from _dressed(text, reasoning, scored)
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
            yield from _dressed(tail, reasoning, scored)
        if stopped_on_string:
            finish = FinishReason.STOP
    if reasoning is not None:
        yield from _pieces(*reasoning.flush(), scored)
    usage = reuse.usage(prompt_tokens, generated) if reuse is not None else Usage(prompt_tokens, generated)
    yield Chunk("", finish, usage, stop_sequence=stops.matched)


def _dressed(text: str, reasoning: ReasoningSplitter | None, scored: list[TokenLogprob]) -> list[Chunk]:
    """`text` as chunks of thinking and answer, the last carrying the logprobs not yet sent."""
    if reasoning is None:
        return _pieces("", text, scored)
    return _pieces(*reasoning.feed(text), scored)


def _pieces(thinking: str, content: str, scored: list[TokenLogprob]) -> list[Chunk]:
    """A chunk of thinking, then one of content, for what is not empty; `scored` goes with the
    last one (and is emptied)."""
    chunks = [Chunk("", reasoning=thinking)] if thinking else []
    if content:
        chunks.append(Chunk(content))
    if chunks and scored:
        last = chunks[-1]
        chunks[-1] = Chunk(last.text, reasoning=last.reasoning, logprobs=tuple(scored))
        scored.clear()
    return chunks


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
