"""Admission control: a fixed number of generations run, a bounded number wait, the rest are refused.

Lives on the event loop (no locks): `acquire` and `release` are only called from the loop. A place
is handed straight to the oldest waiter on release, so waiters are served in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from llmflow.errors import QueueFull, QueueTimeout


class Admission:
    def __init__(self, max_running: int, max_queue: int, retry_after_s: int = 1):
        if max_running < 1 or max_queue < 0:
            raise ValueError("max_running must be >= 1 and max_queue >= 0")
        self.max_running = max_running
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        #: generations that hold a place now
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a free place now, if there is one and nobody waits for it."""
        if self.running < self.max_running and not self._waiters:
            self.running += 1
            return True
        return False

    async def acquire(self, timeout_s: float) -> None:
        """Take a place, waiting up to `timeout_s`. Raises `QueueFull` at once when the queue is
        full, `QueueTimeout` when the wait runs out."""
        if self.try_acquire():
            return
        if len(self._waiters) >= self.max_queue:
            raise QueueFull(self.max_queue, self.retry_after_s)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), max(timeout_s, 0.0))
        except BaseException as exc:
            self._give_up(waiter)
            if isinstance(exc, asyncio.TimeoutError):
                raise QueueTimeout(timeout_s, self.retry_after_s) from None
            raise

    def release(self) -> None:
        """Free a place: hand it to the oldest waiter, or leave it empty."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the place passes on; `running` does not change
                return
        self.running -= 1

    def _give_up(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done() and not waiter.cancelled():
            self.release()  # the place arrived just as we stopped waiting: pass it on
            return
        waiter.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
