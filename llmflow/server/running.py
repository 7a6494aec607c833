"""One admitted generation: a place in the admission queue, a worker thread and a deadline. Its
record (`ObservedGeneration`: timings, usage, outcome, trace) is fed by the route as chunks go
out, and ended and counted in the metrics once both the worker and the response are done."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from starlette.types import Receive

from llmflow.errors import ClientDisconnected, RequestTimeout
from llmflow.observability import ObservedGeneration, traced
from llmflow.server.event_stream import wait_for_disconnect
from llmflow.server.state import ModelState
from llmflow.server.worker import PushedStream, ThreadedStream
from llmflow.types import CancelToken, Chunk

T = TypeVar("T")

#: the final chunk among a stream's items (llmflow's `Chunk`, a model's chunk dict), else None
FinalOf = Callable[[Any], Chunk | None]


def no_final(item: Any) -> Chunk | None:
    return None


class RunningGeneration(Generic[T]):
    """Owns its admission place until the worker finishes, and times the generation out
    `remaining_s` from now; `close()` is the response's side."""

    def __init__(
        self,
        state: ModelState,
        stream: ThreadedStream[T] | PushedStream[T],
        observed: ObservedGeneration,
        final_of: FinalOf,
        remaining_s: float,
    ):
        self.state = state
        self.stream = stream
        self.observed = observed
        self._final_of = final_of
        self._open = 2  # the worker and the response
        self._closed = False
        self._deadline = asyncio.get_running_loop().call_later(max(remaining_s, 0.0), self._time_out)
        state.active.add(self)
        stream.done.add_done_callback(self._worker_done)

    def _time_out(self) -> None:
        self.observed.decide("timeout")
        self.stream.fail(RequestTimeout(self.state.settings.request_timeout_s))

    def _worker_done(self, _: Any) -> None:
        self._deadline.cancel()
        self.state.admission.release()
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
            stream, observed = self.stream, self.observed
            # a final chunk the client did not take (it left) still says how the generation ended
            final = None if stream.last is None else self._final_of(stream.last)
            if final is not None:
                observed.final(final)
            observed.end("stop" if stream.exhausted else "cancelled", stream.failure)
            self.state.metrics.observe(observed.timings, self.state.name)
            self.state.active.discard(self)  # last: once the gauge drops, the metrics are in


async def start_generation(
    state: ModelState,
    make_iterator: Callable[[], Iterator[T]] | Sequence[Callable[[], Iterator[T]]],
    observed: ObservedGeneration,
    receive: Receive,
    final_of: FinalOf = no_final,
    cancel: CancelToken | None = None,
    *,
    on_loop: bool = False,
) -> RunningGeneration[T]:
    """Wait for a place (429 when the queue is full, 503 when the wait outlasts the time limit),
    then start `make_iterator()` in a worker thread, or on the loop with `on_loop` (an engine
    that pushes its tokens: `PushedStream`, which needs `cancel`); `cancel` is what stops it
    early, when the source takes one. A sequence of sources (a `predict` call's rows) shares the
    place: on the loop they run at once, in a worker one after the other. `observed` is ended
    when the generation is over; its trace, when it has one, is begun and active in the worker
    (`traced`); `final_of` finds the final chunk among the items. A client that disconnects
    while waiting (`receive`) leaves the queue (`ClientDisconnected`) and nothing is generated
    for it. The caller must `close()` the generation."""
    timings = observed.timings
    timeout_s = state.settings.request_timeout_s
    if not state.admission.try_acquire():
        await _wait_for_place(state, timeout_s - timings.elapsed_s(), receive)
    timings.admit()
    sources = [make_iterator] if callable(make_iterator) else list(make_iterator)
    pushed = on_loop and cancel is not None
    if not pushed and len(sources) > 1:
        sources = [partial(_in_turn, sources)]
    if observed.trace is not None:
        if len(sources) > 1:
            observed.trace.begin(timings.arrived)  # on the loop the rows run on; none nests a span
        else:
            sources = [partial(traced, observed.trace, sources[0], timings.arrived)]
    try:
        if pushed:
            assert cancel is not None
            stream: ThreadedStream[T] | PushedStream[T] = PushedStream(sources, cancel)
        else:
            stream = ThreadedStream(sources[0], state.executor, cancel)
    except BaseException:
        state.admission.release()
        raise
    return RunningGeneration(state, stream, observed, final_of, timeout_s - timings.elapsed_s())


def _in_turn(sources: Sequence[Callable[[], Iterator[T]]]) -> Iterator[T]:
    """Every source's items, one source after the other (each made when its turn comes)."""
    for make in sources:
        yield from make()


async def _wait_for_place(state: ModelState, timeout_s: float, receive: Receive) -> None:
    """Wait in the admission queue, and give the place up if the client disconnects meanwhile."""
    waiting = asyncio.ensure_future(state.admission.acquire(timeout_s))
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
def stop_on_disconnect(generation: RunningGeneration[Any], receive: Receive) -> Iterator[None]:
    """Within the block, a client that disconnects stops `generation` (within a token when it
    has a cancel token); for answers that are sent whole, once the generation is over."""
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    watcher.add_done_callback(lambda task: task.cancelled() or generation.stream.stop())
    try:
        yield
    finally:
        watcher.cancel()
