"""One admitted generation: a place in the admission queue, a worker thread, a deadline, and the
request's timings, recorded in the metrics (and its MLflow trace ended) once both the worker and
the response are done."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from starlette.types import Receive

from llmflow.errors import ClientDisconnected, RequestTimeout
from llmflow.server.sse import wait_for_disconnect
from llmflow.server.state import ServerState
from llmflow.server.timings import RequestTimings
from llmflow.server.worker import ThreadedStream
from llmflow.types import CancelToken

if TYPE_CHECKING:
    from llmflow.observability import RequestTrace

T = TypeVar("T")

#: from the last item of a stream: (finish reason or None, prompt tokens, completion tokens)
Summary = tuple[str | None, int | None, int | None]


class Generation(Generic[T]):
    """Owns its admission place until the worker finishes; `close()` is the response's side."""

    def __init__(
        self,
        state: ServerState,
        stream: ThreadedStream[T],
        timings: RequestTimings,
        summarize: Callable[[T | None], Summary],
        trace: RequestTrace | None = None,
    ):
        self.state = state
        self.stream = stream
        self.timings = timings
        self.trace = trace
        self._summarize = summarize
        self._open = 2  # the worker and the response
        self._closed = False
        self._deadline: asyncio.TimerHandle | None = None
        state.active.add(self)
        stream.done.add_done_callback(self._worker_done)

    def set_deadline(self, remaining_s: float) -> None:
        timeout_s = self.state.settings.request_timeout_s
        self._deadline = asyncio.get_running_loop().call_later(
            max(remaining_s, 0.0), self._time_out, timeout_s
        )

    def _time_out(self, timeout_s: float) -> None:
        self.timings.outcome = self.timings.outcome or "timeout"
        self.stream.fail(RequestTimeout(timeout_s))

    def _worker_done(self, _: Any) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self.state.admission.release()
        finish, prompt_tokens, completion_tokens = self._summarize(self.stream.last)
        self.timings.prompt_tokens = prompt_tokens
        self.timings.completion_tokens = completion_tokens
        if self.stream.failure is not None:
            self.timings.outcome = self.timings.outcome or "error"
        elif finish is not None:
            self.timings.outcome = self.timings.outcome or finish
        self._settle()

    def close(self) -> None:
        """The response is over (finished, failed or abandoned by the client): stop the worker
        if it still runs. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stream.stop()
        self._settle()

    def _settle(self) -> None:
        self._open -= 1
        if self._open == 0:
            self.timings.finish("stop" if self.stream.exhausted else "cancelled")
            self.state.metrics.observe(self.timings)
            if self.trace is not None:  # begun by the worker; ended with the numbers of the metrics
                self.trace.end(self.timings, self.stream.failure)
            self.state.active.discard(self)  # last: once the gauge drops, the metrics are in


async def start_generation(
    state: ServerState,
    make_iterator: Callable[[], Iterator[T]],
    timings: RequestTimings,
    summarize: Callable[[T | None], Summary],
    cancel: CancelToken | None = None,
    trace: RequestTrace | None = None,
    receive: Receive | None = None,
) -> Generation[T]:
    """Wait for a place (429 when the queue is full, 503 when the wait outlasts the time limit),
    then start `make_iterator()` in a worker thread; `cancel` is what stops it early, when the
    source takes one. `trace`, begun by `make_iterator`'s stream, is ended when the generation
    is over. With `receive`, a client that disconnects while waiting leaves the queue
    (`ClientDisconnected`) and nothing is generated for it. The caller must `close()` the
    generation."""
    timeout_s = state.settings.request_timeout_s
    if not state.admission.try_acquire():
        await _wait_for_place(state, timeout_s - timings.elapsed_s(), receive)
    timings.admit()
    try:
        stream = ThreadedStream(make_iterator, state.executor, cancel)
    except BaseException:
        state.admission.release()
        raise
    generation = Generation(state, stream, timings, summarize, trace)
    generation.set_deadline(timeout_s - timings.elapsed_s())
    return generation


async def _wait_for_place(state: ServerState, timeout_s: float, receive: Receive | None) -> None:
    """Wait in the admission queue, and give the place up if the client disconnects meanwhile."""
    waiting = asyncio.ensure_future(state.admission.acquire(timeout_s))
    if receive is None:
        await waiting
        return
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({waiting, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not waiting.done():
            waiting.cancel()  # leaves the queue (a place that arrived meanwhile is passed on)
            await asyncio.gather(waiting, return_exceptions=True)
    if waiting.cancelled():
        raise ClientDisconnected()
    waiting.result()  # a place, or QueueFull / QueueTimeout


@contextlib.contextmanager
def stop_on_disconnect(generation: Generation[Any], receive: Receive) -> Iterator[None]:
    """Within the block, a client that disconnects stops `generation` (within a token when it
    has a cancel token); for answers that are sent whole, once the generation is over."""
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    watcher.add_done_callback(lambda task: task.cancelled() or generation.stream.stop())
    try:
        yield
    finally:
        watcher.cancel()
