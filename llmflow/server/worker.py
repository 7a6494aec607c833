"""A blocking iterator (a generation) run in a worker thread and read from the event loop.

A generation never runs on the loop. Each item costs the loop one `call_soon_threadsafe`; the worker
never waits for the loop, so a slow client never slows decoding down (items queue up instead,
bounded by max_tokens).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from llmflow.observability.trace import close_iterator
from llmflow.types import CancelToken

T = TypeVar("T")

logger = logging.getLogger(__name__)

_END = object()


@dataclass(slots=True)
class _Failure:
    error: BaseException


class ThreadedStream(Generic[T], AsyncIterator[T]):
    """Runs `make_iterator()` and iterates it in `executor`; `async for` yields its items.

    `stop()` raises `cancel` when there is one (an engine then stops between two tokens and the
    stream ends with its final chunk); otherwise the worker stops after the item it is producing.
    The iterator is closed in the worker thread, which frees the engine. `done` resolves when the
    worker has fully finished; `last` is the last item the worker produced.
    """

    def __init__(
        self,
        make_iterator: Callable[[], Iterator[T]],
        executor: Executor,
        cancel: CancelToken | None = None,
    ):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._stopped = threading.Event()
        self._cancel = cancel
        self.last: T | None = None
        #: True when the iterator ended by itself (not stopped, not failed)
        self.exhausted = False
        self.failure: BaseException | None = None
        self.done: asyncio.Future[None] = self._loop.run_in_executor(executor, self._run, make_iterator)

    # -- worker thread ------------------------------------------------------------------------
    def _run(self, make_iterator: Callable[[], Iterator[T]]) -> None:
        iterator: Iterator[T] | None = None
        put = self._put
        try:
            iterator = make_iterator()
            # With a cancel token the source stops by itself within a token and ends with its
            # final item (usage); without one, the worker stops reading after the current item.
            drain = self._cancel is not None
            for item in iterator:
                self.last = item
                put(item)
                if not drain and self._stopped.is_set():
                    break
            else:
                self.exhausted = True
        except BaseException as exc:  # handed to the reader, which decides what it means
            self.failure = exc
            put(_Failure(exc))
        finally:
            try:
                close_iterator(iterator)  # frees the engine
            except Exception:
                logger.exception("closing a generation failed")
            put(_END)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is reading any more
            self._stopped.set()

    # -- event loop -----------------------------------------------------------------------------
    async def __anext__(self) -> T:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # stay ended for later readers
            raise StopAsyncIteration
        if type(item) is _Failure:
            raise item.error
        return item

    def fail(self, error: BaseException) -> None:
        """Make the reader raise `error` next (e.g. a timeout), and stop the worker."""
        self._queue.put_nowait(_Failure(error))
        self.stop()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._cancel is not None:
            self._cancel.cancel()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()
