"""Several answers to one prompt (OpenAI's `n`), streamed as one sequence of chunks that say
which answer they belong to.

The engine gives one token iterator per choice (`Engine.generate_group`: a batching engine
computes the prompt once and shares its KV cache); each runs through the streaming core on its
own. A batching engine's choices are read at once: where its token streams say which has tokens
waiting (`ready`, the llama.cpp scheduler's), in turn as their tokens arrive, in the reader's
thread; otherwise each in a thread of its own. An engine that decodes one at a time answers them
in turn.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from llmflow.params import SamplingParams
from llmflow.types import CancelToken, Chunk, PromptReuse

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest

T = TypeVar("T")

SEED_SPACE = 2**32


@dataclass(frozen=True, slots=True)
class ChoiceChunk:
    """A chunk of choice `index`. A choice's final chunk has its finish reason and, for the
    last choice to end, `usage` of all of them (the prompt once, every choice's tokens). With a
    `split` (see `stream_choices`), `chunk` may also be one of its items (a function call piece)."""

    index: int
    chunk: Chunk | Any


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """Each choice its own seed: a request's seed and the next ones (random without one)."""
    if params.seed is None:
        return [params] * n
    return [params.model_copy(update={"seed": (params.seed + i) % SEED_SPACE}) for i in range(n)]


def stream_choices(
    llm: LLM,
    request: PreparedRequest,
    n: int,
    cancel: CancelToken,
    split: Callable[[Iterator[Chunk]], Iterator[Any]] | None = None,
) -> Iterator[ChoiceChunk]:
    """Every choice's chunks; the very last one carries the usage of all. `split`: applied to
    each choice's chunks on its own (function calls split from its text); its items pass through,
    its final chunk is the choice's."""
    params = choice_params(request.params, n)
    reuse = PromptReuse()
    with llm.exclusive():
        # each choice its own constraint state: a sampled token advances only its choice's matcher
        streams = llm.engine.generate_group(
            request.prompt_ids,
            params,
            cancel,
            llm.matchers(request, n),
            reuse,
            next_turn_opening=request.next_turn_opening,
        )
        chunks = [
            llm.chunks_of(tokens, request, cancel, p, reuse)
            for tokens, p in zip(streams, params, strict=True)
        ]
        if split is not None:
            chunks = [split(stream) for stream in chunks]
        labelled = [_labelled(i, stream) for i, stream in enumerate(chunks)]
        merged = merged_streams(labelled, cancel, concurrently=llm.engine.concurrent, sources=streams)
        try:
            yield from _with_total_usage(merged, n)
        finally:
            merged.close()
            for stream in chunks:
                stream.close()  # type: ignore[attr-defined]


def _with_total_usage(merged: Iterator[ChoiceChunk], n: int) -> Iterator[ChoiceChunk]:
    completion_tokens = 0
    ended = 0
    for item in merged:
        final = item.chunk
        if not isinstance(final, Chunk) or final.usage is None:
            yield item
            continue
        ended += 1
        completion_tokens += final.usage.completion_tokens
        usage = None
        if ended == n:
            # the choices share one engine report: the last to end read all of its counts
            usage = replace(final.usage, completion_tokens=completion_tokens)
        yield ChoiceChunk(item.index, Chunk("", final.finish_reason, usage))


def _labelled(index: int, chunks: Iterator[Any]) -> Iterator[ChoiceChunk]:
    try:
        for chunk in chunks:
            yield ChoiceChunk(index, chunk)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def merged_streams(
    streams: list[Iterator[T]],
    cancel: CancelToken,
    *,
    concurrently: bool,
    sources: Sequence[Iterator[int]] = (),
) -> Iterator[T]:
    """The items of every choice's stream: read at once, in the order they come, on an engine
    that decodes choices together (`concurrently`); one stream after the other otherwise.
    `sources`: the choices' token iterators, which may tell whether their tokens have arrived."""
    if not concurrently:
        return _in_turn(streams)
    if sources and all(hasattr(source, "ready") for source in sources):
        return _as_they_arrive(streams, sources, cancel)
    return _concurrently(streams, cancel)


def _in_turn(streams: list[Iterator[T]]) -> Iterator[T]:
    for stream in streams:
        yield from stream


def _as_they_arrive(streams: list[Iterator[T]], sources: Sequence[Any], cancel: CancelToken) -> Iterator[T]:
    """One item at a time from a choice whose tokens have arrived (`source.ready`), the others'
    turn next; when none has, wait on the one whose turn it is (the engine gives every choice a
    token each step, so none waits long). No thread: reading waits where a token stream does.
    Closing this before every choice has ended stops them all (through `cancel`)."""
    live = list(zip(streams, sources, strict=True))
    try:
        while live:
            turn = next((k for k, (_, source) in enumerate(live) if source.ready), 0)
            stream = live[turn][0]
            try:
                item = next(stream)
            except StopIteration:
                del live[turn]
                continue
            live.append(live.pop(turn))
            yield item
    finally:
        if live:
            cancel.cancel()


def _concurrently(streams: list[Iterator[T]], cancel: CancelToken) -> Iterator[T]:
    """Each choice read in a thread of its own; their items in the order they come. Closing
    this stops them all (through `cancel`) and waits for the threads."""
    out: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read(stream: Iterator[T]) -> None:
        try:
            for item in stream:
                out.put(item)
        except BaseException as exc:
            out.put(exc)
        finally:
            out.put(None)

    threads = [
        threading.Thread(target=read, args=(s,), name=f"llmflow-choice-{i}", daemon=True)
        for i, s in enumerate(streams)
    ]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            item = out.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        if running:
            cancel.cancel()
        for thread in threads:
            thread.join()
