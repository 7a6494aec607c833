"""Tokens from a batching engine's scheduler thread to their consumers: one wake-up per step.

The scheduler appends each request's tokens to its `Mailbox` as a forward pass samples them, and
once the pass is done wakes the consumers that wait (`wake`): a consumer thread through its
event; consumers on an event loop through one `call_soon_threadsafe` per loop and pass, however
many streams the loop serves.

A consumer on an event loop is a generation run in a `LoopGreenlet` (the server's
`PushedStream`): where it would block on an empty mailbox, it switches back to the loop with a
future to await instead, and the loop switches into it again once the future is resolved. The
text work of a stream (detokenizing, stop strings, tool calls, the wire format) thus runs on the
loop, with no thread per stream or per choice and no hand-off per token. The same bridge as
SQLAlchemy's asyncio support: plain iterators, suspended where they would wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import greenlet


class LoopGreenlet(greenlet.greenlet):
    """A consumer on `loop`: `Mailbox.take` switches to its parent with a future to await."""

    def __init__(self, run: Any, loop: asyncio.AbstractEventLoop):
        super().__init__(run)
        self.loop = loop


class Mailbox:
    """One request's items (tokens, then an end marker or an error), put by the scheduler thread
    and taken by one consumer. `waiter` is what the consumer waits on while it is empty: its
    thread's event, or the future its loop awaits. Only the consumer writes it: the scheduler
    reading it while it changes costs at most a spare wake-up, never a lost one."""

    __slots__ = ("items", "waiter", "_event")

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.waiter: threading.Event | asyncio.Future[None] | None = None
        self._event: threading.Event | None = None

    def put(self, item: Any) -> None:
        """The scheduler's side (the consumer is woken by `wake`, once the pass is over)."""
        self.items.append(item)

    def take(self) -> Any:
        """The next item, waiting for it: the thread blocks, a `LoopGreenlet` yields to its loop.
        The waiter is set before the mailbox is looked at again, so an item put meanwhile is
        either seen here or wakes the waiter."""
        items = self.items
        while not items:
            current = greenlet.getcurrent()
            if type(current) is LoopGreenlet:
                future = current.loop.create_future()
                self.waiter = future
                if not items:
                    current.parent.switch(future)
            else:
                event = self._event or self._new_event()
                event.clear()
                self.waiter = event
                if not items:
                    event.wait()
            self.waiter = None
        return items.popleft()

    def _new_event(self) -> threading.Event:
        self._event = threading.Event()
        return self._event


def wake(mailboxes: Iterable[Mailbox]) -> None:
    """Wake the consumers of `mailboxes` that wait (from the scheduler thread, after a pass)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] | None = None
    for box in mailboxes:
        waiter = box.waiter
        if waiter is None:
            continue
        if type(waiter) is threading.Event:
            waiter.set()
        else:
            if by_loop is None:
                by_loop = {}
            by_loop.setdefault(waiter.get_loop(), []).append(waiter)  # type: ignore[union-attr]
    if by_loop:
        for loop, futures in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is reading any more
                loop.call_soon_threadsafe(_resolve, futures)


#: how often `wait_taken` looks again (a sleep of this length gives the cores away)
TAKEN_POLL_S = 0.0001


def wait_taken(mailboxes: Sequence[Mailbox], timeout_s: float) -> None:
    """Return once the consumers of `mailboxes` have dealt with what they were given, or after
    `timeout_s`: each has taken it and waits again, and each event loop among them has run what
    that made ready (the response's write of it). The scheduler thread sleeps meanwhile, so that
    on a machine whose cores a forward pass takes, the consumers run now rather than between the
    next pass's threads."""
    deadline = time.perf_counter() + timeout_s
    while any(box.items or box.waiter is None for box in mailboxes):
        if time.perf_counter() >= deadline:
            return
        time.sleep(TAKEN_POLL_S)
    loops = {box.waiter.get_loop() for box in mailboxes if isinstance(box.waiter, asyncio.Future)}
    for loop in loops:
        ran = threading.Event()
        try:
            loop.call_soon_threadsafe(ran.set)  # after the callbacks that are ready now
        except RuntimeError:  # a closed loop
            continue
        ran.wait(max(0.0, deadline - time.perf_counter()))


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
