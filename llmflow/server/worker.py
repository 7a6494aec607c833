"""A generation's iterator, run apart from the code that reads it on the event loop.

`ThreadedStream` runs it in a worker thread: for engines that compute in the reader's thread (one
generation at a time) and for other models' streams. Each item costs the loop one
`call_soon_threadsafe`.

`PushedStream` runs it on the loop itself, for an engine whose tokens come from a scheduler
thread through mailboxes (`Engine.pushes_tokens`, see `llmflow.engines.handoff`): the iterator
runs in a greenlet that gives the loop back wherever it would wait for a token, so a stream
needs no thread, and a step's tokens for every stream cost the loop one hand-off. Several
iterators (a `predict` call's rows) run at once, a greenlet each, into one stream.

Either way the producer never waits for the reader, so a slow client never slows decoding down
(items queue up instead, bounded by max_tokens).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from llmflow.engines.handoff import LoopGreenlet
from llmflow.observability.trace import close_iterator
from llmflow.types import CancelToken

T = TypeVar("T")

logger = logging.getLogger(__name__)

_END = object()


@dataclass(slots=True)
class _Failure:
    error: BaseException


class _Relayed(Generic[T], AsyncIterator[T]):
    """What both streams share: the reader's queue on the loop, the producing loop (items, then
    a failure or the end of the last producer), and the reader's side (`async for`, `fail`).
    `last` is the last item produced; `exhausted`: every iterator ended by itself (not stopped,
    not failed)."""

    def __init__(self, producers: int = 1) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._producing = producers
        self._cut = False
        self.last: T | None = None
        self.exhausted = False
        self.failure: BaseException | None = None

    def _relay(
        self,
        make_iterator: Callable[[], Iterator[T]],
        put: Callable[[Any], None],
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        """Make and read the iterator, each item to `put`; stop early when `stopping()` (only for
        a source without a cancel token: one with it ends by itself, with its final item)."""
        iterator: Iterator[T] | None = None
        cut = True
        try:
            iterator = make_iterator()
            for item in iterator:
                self.last = item
                put(item)
                if stopping is not None and stopping():
                    break
            else:
                cut = False
        except BaseException as exc:  # handed to the reader, which decides what it means
            self.failure = self.failure or exc
            put(_Failure(exc))
        finally:
            try:
                close_iterator(iterator)  # frees the engine
            except Exception:
                logger.exception("closing a generation failed")
            self._cut = self._cut or cut
            self._producing -= 1
            if self._producing == 0:  # the last producer (one thread, or greenlets on one loop)
                self.exhausted = not self._cut
                put(_END)

    async def __anext__(self) -> T:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # stay ended for later readers
            raise StopAsyncIteration
        if type(item) is _Failure:
            raise item.error
        return item

    def fail(self, error: BaseException) -> None:
        """Make the reader raise `error` next (e.g. a timeout), and stop the generation."""
        self._queue.put_nowait(_Failure(error))
        self.stop()

    def stop(self) -> None:
        raise NotImplementedError


class ThreadedStream(_Relayed[T]):
    """Runs `make_iterator()` and iterates it in `executor`; `async for` yields its items.

    `stop()` raises `cancel` when there is one (an engine then stops between two tokens and the
    stream ends with its final chunk); otherwise the worker stops after the item it is producing.
    The iterator is closed in the worker thread, which frees the engine. `done` resolves when the
    worker has fully finished.
    """

    def __init__(
        self,
        make_iterator: Callable[[], Iterator[T]],
        executor: Executor,
        cancel: CancelToken | None = None,
    ):
        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._stopped = threading.Event()
        self._cancel = cancel
        stopping = None if cancel is not None else self._stopped.is_set
        self.done: asyncio.Future[None] = self._loop.run_in_executor(
            executor, self._relay, make_iterator, self._put, stopping
        )

    def _put(self, item: Any) -> None:
        """From the worker thread: one `call_soon_threadsafe` per item."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is reading any more
            self._stopped.set()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._cancel is not None:
            self._cancel.cancel()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()


class PushedStream(_Relayed[T]):
    """`ThreadedStream`'s contract, with `make_iterator()` run on the loop in a `LoopGreenlet`:
    a task switches into it, and awaits the future it hands back when its token stream is empty.
    A sequence of them run at once, a greenlet each, their items in the order they come.
    `stop()` raises `cancel` (required: the engine then ends the streams within a token, each
    with its final item); `done` resolves once every iterator is closed."""

    def __init__(
        self,
        make_iterator: Callable[[], Iterator[T]] | Sequence[Callable[[], Iterator[T]]],
        cancel: CancelToken,
    ):
        makers = [make_iterator] if callable(make_iterator) else list(make_iterator)
        super().__init__(len(makers))
        loop = asyncio.get_running_loop()
        self._cancel = cancel
        self._stopped = False
        # the items go straight into the reader's queue: the greenlets run on the loop's thread
        put = self._queue.put_nowait
        greenlets = [LoopGreenlet(partial(self._relay, make, put), loop) for make in makers]
        # each runs at once until it first waits: its request reaches the engine before the
        # response sends a byte (a first token computed while the headers go out)
        drives = [loop.create_task(self._drive(greenlet, greenlet.switch())) for greenlet in greenlets]
        self.done: asyncio.Future[Any] = drives[0] if len(drives) == 1 else asyncio.gather(*drives)

    @staticmethod
    async def _drive(greenlet: LoopGreenlet, waiting: Any) -> None:
        """Switch into an iterator's greenlet until it has finished, awaiting what it waits for
        (`waiting`: what its first run waits for; None once it has finished)."""
        while waiting is not None:
            await waiting
            waiting = greenlet.switch()

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._cancel.cancel()

    @property
    def stopped(self) -> bool:
        return self._stopped
