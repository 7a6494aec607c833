"""ComputeThread: every job on one thread, whichever thread asks; early close and cancel stop the
producer within an item and wait for it; failures reach the reader."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmflow.engines.compute_thread import ComputeThread
from llmflow.types import CancelToken


@pytest.fixture
def compute() -> Iterator[ComputeThread]:
    thread = ComputeThread("test-compute")
    yield thread
    thread.close()


def counting(produced: list[int], threads: set[int], n: int = 1000, pause_s: float = 0.001) -> Iterator[int]:
    """Like an engine: an item takes a while (here `pause_s`) to produce."""
    for i in range(n):
        time.sleep(pause_s)
        threads.add(threading.get_ident())
        produced.append(i)
        yield i


def test_items_come_in_order_from_one_thread_for_every_caller(compute: ComputeThread) -> None:
    threads: set[int] = set()

    def read(_: int) -> list[int]:
        return list(compute.iterate(lambda: counting([], threads, 50), CancelToken()))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(read, range(8)))
    assert results == [list(range(50))] * 8
    assert len(threads) == 1
    assert threading.get_ident() not in threads


def test_closing_early_stops_the_producer_and_waits_for_it(compute: ComputeThread) -> None:
    produced: list[int] = []
    closed_on: list[int] = []

    def source() -> Iterator[int]:
        try:
            yield from counting(produced, set())
        finally:
            closed_on.append(threading.get_ident())

    stream = compute.iterate(source, CancelToken())
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert closed_on, "the producer's iterator is closed before close() returns"
    assert closed_on[0] != threading.get_ident()
    assert len(produced) < 1000
    # the thread is free for the next job at once
    assert compute.call(lambda: 42) == 42


def test_cancel_stops_the_producer_within_an_item(compute: ComputeThread) -> None:
    cancel = CancelToken()
    produced: list[int] = []
    got = []
    for item in compute.iterate(lambda: counting(produced, set()), cancel):
        got.append(item)
        if item == 5:
            cancel.cancel()
    assert len(produced) < 1000
    assert got == produced[: len(got)]


def test_a_failure_reaches_the_reader_and_the_thread_goes_on(compute: ComputeThread) -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("boom")

    stream = compute.iterate(failing, CancelToken())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="boom"):
        next(stream)
    with pytest.raises(ZeroDivisionError):
        compute.call(lambda: 1 / 0)
    assert list(compute.iterate(lambda: iter([7, 8]), CancelToken())) == [7, 8]


def test_a_job_inside_the_thread_runs_inline(compute: ComputeThread) -> None:
    def nested() -> list[int]:
        return [*compute.iterate(lambda: iter([1, 2]), CancelToken()), compute.call(lambda: 3)]

    assert compute.call(nested) == [1, 2, 3]


def test_close_lets_queued_work_finish() -> None:
    compute = ComputeThread("test-close")
    done = []
    stream = compute.iterate(lambda: iter(range(3)), CancelToken())
    assert next(stream) == 0
    closer = threading.Thread(target=compute.close)
    closer.start()
    time.sleep(0.05)
    done.extend(stream)
    closer.join(timeout=5)
    assert done == [1, 2]
    assert not closer.is_alive()
