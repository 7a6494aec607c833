"""Tokens from the scheduler thread to consumers on threads and on an event loop (`handoff`,
`PushedStream`), with the simulated backend of the scheduler tests: every stream gets exactly
its solo tokens, streams on a loop need no thread of their own, and a loop is woken once per
forward pass however many streams it serves."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time

import pytest

from llmflow.engines.handoff import Mailbox, wait_taken, wake
from llmflow.errors import EngineFailed
from llmflow.server.worker import PushedStream
from llmflow.types import CancelToken
from tests.engines.test_scheduler import alone, make, params, prompt, submit


async def read_all(stream: PushedStream) -> list[int]:
    return [token async for token in stream]


def test_a_thread_takes_every_item_in_order_however_the_wake_ups_fall():
    box, end = Mailbox(), object()
    taken: list[int] = []

    def consume() -> None:
        while (item := box.take()) is not end:
            taken.append(item)

    reader = threading.Thread(target=consume)
    reader.start()
    rng = random.Random(7)
    for i in range(5000):
        box.put(i)
        if rng.random() < 0.3:
            wake([box])
    box.put(end)
    wake([box])
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert taken == list(range(5000))


def test_waiting_for_a_taken_item_ends_once_its_thread_consumer_waits_again():
    box, taken = Mailbox(), threading.Event()

    def consume() -> None:
        time.sleep(0.05)  # busy elsewhere when the item comes
        box.take()
        taken.set()
        box.take()  # waits for the end

    reader = threading.Thread(target=consume)
    reader.start()
    box.put(1)
    wake([box])
    wait_taken([box], timeout_s=30)
    assert taken.is_set() and not box.items and box.waiter is not None
    box.put(None)
    wake([box])
    reader.join(timeout=30)


def test_waiting_for_an_item_nobody_takes_ends_at_its_time_limit():
    box = Mailbox()
    box.put(1)
    started = time.perf_counter()
    wait_taken([box], timeout_s=0.05)
    assert 0.05 <= time.perf_counter() - started < 5
    assert box.items


def test_the_pass_after_a_first_token_waits_until_the_loop_has_dealt_with_it():
    """The loop's work on a first token (here a reader busy for 50 ms with it) runs before the
    next forward pass: a pass would take every core the loop needs to send the token."""
    backend, scheduler = make(parallel=2, delay_s=0.001, first_token_wait_s=30)
    started: list[float] = []
    decode = backend.decode

    def timed(entries):
        started.append(time.perf_counter())
        return decode(entries)

    backend.decode = timed
    try:

        async def main() -> tuple[list[int], float, float]:
            cancel = CancelToken()
            stream = PushedStream(lambda: submit(scheduler, prompt(3), params(8), cancel), cancel)
            tokens, received, handled = [], 0.0, 0.0
            async for token in stream:
                if not tokens:
                    received = time.perf_counter()
                    time.sleep(0.05)  # the loop busy with the first token
                    handled = time.perf_counter()
                tokens.append(token)
            return tokens, received, handled

        tokens, received, handled = asyncio.run(main())
        assert tokens == alone(prompt(3), 8)
        assert not [t for t in started if received <= t < handled]  # no pass while it was busy
        assert any(t >= handled for t in started)
    finally:
        scheduler.close()


@pytest.fixture
def switching_often():
    """The GIL handed between threads as often as it can be: the interleavings that lose a
    wake-up, if one can be lost, happen within a few thousand items."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def test_readers_on_a_loop_miss_no_wake_up(switching_often):
    boxes, end = [Mailbox() for _ in range(4)], object()

    def items(box: Mailbox):
        while (item := box.take()) is not end:
            yield item

    def produce() -> None:
        rng = random.Random(3)
        for i in range(3000):
            for box in boxes:
                box.put(i)
            wake(rng.sample(boxes, rng.randint(0, len(boxes))) if i % 7 else boxes)
        for box in boxes:
            box.put(end)
        wake(boxes)

    async def main() -> list[list[int]]:
        streams = [PushedStream(lambda box=box: items(box), CancelToken()) for box in boxes]
        producer = threading.Thread(target=produce)
        producer.start()
        try:
            return await asyncio.wait_for(asyncio.gather(*(read_all(s) for s in streams)), 60)
        finally:
            producer.join()

    assert asyncio.run(main()) == [list(range(3000))] * 4


def test_streams_on_a_loop_get_their_solo_tokens_with_no_thread_each():
    _, scheduler = make(parallel=8, delay_s=0.002)
    try:

        async def main() -> tuple[list[list[int]], int]:
            streams = [
                PushedStream(lambda i=i, c=c: submit(scheduler, prompt(i), params(24, seed=i), c), c)
                for i, c in enumerate(CancelToken() for _ in range(12))
            ]
            threads = threading.active_count()
            results = await asyncio.gather(*(read_all(s) for s in streams))
            await asyncio.gather(*(s.done for s in streams))
            assert all(s.exhausted and s.failure is None for s in streams)
            return results, threads

        before = threading.active_count()
        results, during = asyncio.run(main())
        assert during == before  # no worker thread per stream, none for the loop's readers
        assert results == [alone(prompt(i), 24, seed=i) for i in range(12)]
    finally:
        scheduler.close()


def test_a_loop_is_woken_once_per_forward_pass_for_all_its_streams():
    backend, scheduler = make(parallel=8, delay_s=0.002)
    try:

        async def main() -> int:
            loop = asyncio.get_running_loop()
            wakeups = 0
            original = loop.call_soon_threadsafe

            def counted(*args, **kwargs):
                nonlocal wakeups
                wakeups += 1
                return original(*args, **kwargs)

            loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
            streams = [
                PushedStream(lambda i=i, c=c: submit(scheduler, prompt(i), params(32, seed=i), c), c)
                for i, c in enumerate(CancelToken() for _ in range(8))
            ]
            await asyncio.gather(*(read_all(s) for s in streams))
            return wakeups

        wakeups = asyncio.run(main())
        passes = len(backend.decode_calls)
        assert passes < 8 * 32  # the streams were batched
        assert wakeups <= passes + 1  # not one per token: at most one per pass (and the end)
    finally:
        scheduler.close()


def test_stopping_a_stream_on_a_loop_ends_it_and_frees_its_sequence():
    _, scheduler = make(parallel=2, delay_s=0.002)
    try:

        async def main() -> list[int]:
            cancel = CancelToken()
            stream = PushedStream(lambda: submit(scheduler, prompt(1), params(200), cancel), cancel)
            received = [await stream.__anext__() for _ in range(3)]
            stream.stop()
            received += [token async for token in stream]
            await asyncio.wait_for(stream.done, 10)
            return received

        received = asyncio.run(main())
        assert 3 <= len(received) < 200
        assert received == alone(prompt(1), 200)[: len(received)]
        assert scheduler.stats().running == 0
    finally:
        scheduler.close()


def test_a_failed_pass_reaches_the_reader_on_the_loop():
    backend, scheduler = make(parallel=2, delay_s=0.002)
    try:
        backend.fail_seq = 0

        async def main() -> None:
            cancel = CancelToken()
            stream = PushedStream(lambda: submit(scheduler, prompt(2), params(50), cancel), cancel)
            with pytest.raises(EngineFailed):
                await read_all(stream)
            await asyncio.wait_for(stream.done, 10)
            assert isinstance(stream.failure, EngineFailed)

        asyncio.run(main())
    finally:
        scheduler.close()


def test_a_stream_on_a_loop_hands_its_request_to_the_engine_as_it_is_made():
    """The generation runs until it first waits while the stream is made: the request reaches
    the engine before the server sends a byte of the response (nothing awaited in between)."""
    _, scheduler = make(parallel=2, delay_s=0.002)
    try:

        async def main() -> list[int]:
            cancel = CancelToken()
            stream = PushedStream(lambda: submit(scheduler, prompt(3), params(8), cancel), cancel)
            stats = scheduler.stats()
            assert stats.running + stats.waiting == 1
            return await read_all(stream)

        assert asyncio.run(main()) == alone(prompt(3), 8)
    finally:
        scheduler.close()
