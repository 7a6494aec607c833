"""One long-lived thread for all of an engine's forward passes.

llama.cpp built with OpenMP (llama-cpp-python's default build) keeps a team of worker threads for
every thread that ever ran a forward pass, until that thread ends. Once a process holds more
OpenMP threads than cores, libgomp stops spinning between parallel regions, and every one of the
dozens of parallel regions of a forward pass pays thread wake-ups: decoding measured 2.5x slower
on 2 cores. An engine that computed in its callers' threads (a server's workers, a pool of
in-process callers, a benchmark's main thread) would get there after a few requests. Running every
forward pass of an engine on one thread keeps one team, whoever calls.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from llmflow.types import CancelToken

T = TypeVar("T")

log = logging.getLogger(__name__)

_STOP = object()
_END = object()


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class ComputeThread:
    """Runs jobs one after another on a single daemon thread."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            job()

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` run on the thread; waits for its result."""
        if self._thread is threading.current_thread():
            return function(*args)
        future: Future[T] = Future()

        def job() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as exc:
                future.set_exception(exc)

        self._jobs.put(job)
        return future.result()

    def iterate(self, make_iterator: Callable[[], Iterator[T]], cancel: CancelToken) -> Iterator[T]:
        """The items of `make_iterator()`, produced on the thread and handed over one by one.

        The producer runs ahead of the reader (the next forward pass overlaps with the reader's
        work on this item) and stops within one item once the reader closes this iterator or
        `cancel` fires. Its iterator is closed on the thread, and closing this one returns once
        that is done, so the engine is free again."""
        if self._thread is threading.current_thread():
            yield from make_iterator()
            return
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        closed = threading.Event()

        def produce() -> None:
            iterator: Iterator[T] | None = None
            try:
                iterator = make_iterator()
                for item in iterator:
                    out.put(item)
                    if closed.is_set() or cancel.cancelled:
                        break
            except BaseException as exc:
                out.put(_Failure(exc))
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        log.exception("closing a generation failed")
                out.put(_END)

        self._jobs.put(produce)
        ended = False
        try:
            while True:
                item = out.get()
                if item is _END:
                    ended = True
                    return
                if cancel.cancelled:  # what was produced after a cancel is not handed out
                    return
                if type(item) is _Failure:
                    raise item.error
                yield item
        finally:
            if not ended:  # closed early or failed: wait until the engine is free again
                closed.set()
                while out.get() is not _END:
                    pass

    def close(self) -> None:
        """Let queued jobs finish, then end the thread (which frees its OpenMP team)."""
        self._jobs.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join()
