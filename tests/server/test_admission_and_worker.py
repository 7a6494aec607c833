"""Admission control and the worker-thread stream on their own (no HTTP, no model)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmflow.errors import QueueFull, QueueTimeout, RequestTimeout
from llmflow.server.admission import Admission
from llmflow.server.worker import ThreadedStream
from llmflow.types import CancelToken


def run(coro):
    return asyncio.run(coro)


def test_admission_runs_waits_then_refuses():
    async def scenario():
        admission = Admission(max_running=1, max_queue=1)
        await admission.acquire(1)
        waiter = asyncio.ensure_future(admission.acquire(5))
        await asyncio.sleep(0)
        assert (admission.running, admission.waiting) == (1, 1)
        with pytest.raises(QueueFull) as refused:
            await admission.acquire(1)
        assert refused.value.retry_after_s == 1
        admission.release()  # the place passes to the waiter
        await waiter
        assert (admission.running, admission.waiting) == (1, 0)
        admission.release()
        assert admission.running == 0

    run(scenario())


def test_admission_wait_times_out_and_leaves_the_queue():
    async def scenario():
        admission = Admission(max_running=1, max_queue=4)
        await admission.acquire(1)
        with pytest.raises(QueueTimeout):
            await admission.acquire(0.05)
        assert admission.waiting == 0
        admission.release()
        await admission.acquire(0.05)  # the place is free again

    run(scenario())


def test_admission_cancelled_waiter_does_not_keep_a_place():
    async def scenario():
        admission = Admission(max_running=1, max_queue=4)
        await admission.acquire(1)
        waiter = asyncio.ensure_future(admission.acquire(5))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert admission.waiting == 0
        admission.release()
        assert admission.running == 0

    run(scenario())


def test_admission_serves_waiters_in_arrival_order():
    async def scenario():
        admission = Admission(max_running=1, max_queue=8)
        await admission.acquire(1)
        order: list[int] = []

        async def wait(i: int) -> None:
            await admission.acquire(5)
            order.append(i)
            admission.release()

        tasks = [asyncio.ensure_future(wait(i)) for i in range(5)]
        await asyncio.sleep(0)
        admission.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4] and admission.running == 0

    run(scenario())


class Counting:
    """A blocking iterator that takes `delay_s` per item and counts how many it produced."""

    def __init__(self, n: int, delay_s: float):
        self.n = n
        self.delay_s = delay_s
        self.produced = 0
        self.closed = threading.Event()
        self.thread: str | None = None

    def __iter__(self):
        try:
            for i in range(self.n):
                time.sleep(self.delay_s)
                self.produced += 1
                self.thread = threading.current_thread().name
                yield i
        finally:
            self.closed.set()


def test_threaded_stream_yields_everything_off_the_loop():
    source = Counting(20, 0.0)

    async def scenario():
        with ThreadPoolExecutor(1, thread_name_prefix="gen") as pool:
            stream = ThreadedStream(lambda: iter(source), pool)
            items = [item async for item in stream]
            await stream.done
            return items, stream

    items, stream = run(scenario())
    assert items == list(range(20))
    assert stream.exhausted and stream.last == 19 and stream.failure is None
    assert source.thread is not None and source.thread.startswith("gen")


def test_stopping_a_stream_ends_the_generation_within_one_item():
    source = Counting(1000, 0.01)

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            stream = ThreadedStream(lambda: iter(source), pool)
            received = 0
            async for _ in stream:
                received += 1
                if received == 5:
                    break
            produced_at_stop = source.produced
            stream.stop()
            await stream.done
            return produced_at_stop, stream

    produced_at_stop, stream = run(scenario())
    assert source.closed.is_set() and not stream.exhausted
    assert source.produced <= produced_at_stop + 1  # at most the item being produced at stop


def test_a_failing_iterator_raises_in_the_reader():
    def broken():
        yield 1
        raise ValueError("broken")

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            stream = ThreadedStream(broken, pool)
            assert await stream.__anext__() == 1
            with pytest.raises(ValueError, match="broken"):
                await stream.__anext__()
            await stream.done
            return stream

    assert isinstance(run(scenario()).failure, ValueError)


def test_fail_interrupts_the_reader_and_stops_the_worker():
    source = Counting(1000, 0.01)

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            stream = ThreadedStream(lambda: iter(source), pool)
            await stream.__anext__()
            stream.fail(RequestTimeout(1))
            with pytest.raises(RequestTimeout):
                async for _ in stream:
                    pass
            await stream.done

    run(scenario())
    assert source.closed.is_set() and source.produced < 1000


def test_with_a_cancel_token_the_worker_reads_the_source_to_its_own_end():
    """A cancelled source still says how it ended (its final item carries the usage)."""

    def cancellable(cancel: CancelToken):
        for i in range(1000):
            if cancel.cancelled:
                yield "cancelled"
                return
            time.sleep(0.01)
            yield i

    cancel = CancelToken()

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            stream = ThreadedStream(lambda: cancellable(cancel), pool, cancel)
            await stream.__anext__()
            stream.stop()
            await stream.done
            return stream

    stream = run(scenario())
    assert cancel.cancelled and stream.last == "cancelled" and stream.exhausted
