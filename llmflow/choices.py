"""Several answers to one prompt (OpenAI's `n`): each choice's seed, and the reading of the
choices' streams as one (`llmflow.generation` makes the streams and their events).

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
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from llmflow.engines.base import SEED_SPACE
from llmflow.params import SamplingParams
from llmflow.types import CancelToken

T = TypeVar("T")


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """Each choice its own seed: a request's seed and the next ones (random without one)."""
    if params.seed is None:
        return [params] * n
    return [params.model_copy(update={"seed": (params.seed + i) % SEED_SPACE}) for i in range(n)]


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
