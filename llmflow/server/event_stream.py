"""Server-sent events: framing, and the response that sends them.

Events are pre-encoded bytes (`data: <json>\\n\\n`); JSON never holds a raw newline, so one
`data:` line per event is always right. `EventStream` is a small ASGI response of llmflow's own:
three sibling tasks (send the events, ping while idle, watch for the client leaving), the first
to finish cancels the others, and `on_close` runs however the response ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

#: a comment line: clients skip it, proxies see a live connection
PING = b": ping\n\n"
PING_INTERVAL_S = 15.0

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (call once the request body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(Response):
    """A `text/event-stream` response of `events`; `on_close` is called once, however it ends,
    even when the client left before the first byte (the events iterator then never starts, so
    its own `finally` would not run); `ping` is what goes out every `ping_interval_s` while
    idle (a comment; Anthropic's clients get a `ping` event). Shutdown is the server's job
    (`runner.GracefulServer` ends the generations, so streams close with their last events)."""

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        on_close: Callable[[], None],
        ping_interval_s: float | None = PING_INTERVAL_S,
        ping: bytes = PING,
    ):
        # Response's own __init__ would render a body and set its length: this one streams
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_HEADERS)
        self._events = events
        self._on_close = on_close
        self._ping_interval_s = ping_interval_s
        self._ping_event = ping
        # the events and the pings share one connection: one body message at a time, and none
        # after the last (a ping that woke while the last event was being sent came after it)
        self._sending = asyncio.Lock()
        self._complete = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with anyio.create_task_group() as tasks:

                async def first_to_finish(job: Callable[[], Awaitable[None]]) -> None:
                    with contextlib.suppress(OSError):  # the client went away mid-send
                        await job()
                    tasks.cancel_scope.cancel()

                tasks.start_soon(first_to_finish, lambda: self._send_events(send))
                if self._ping_interval_s is not None:  # None: nothing but events (strict clients)
                    tasks.start_soon(first_to_finish, lambda: self._ping(send))
                tasks.start_soon(first_to_finish, lambda: wait_for_disconnect(receive))
        finally:
            try:
                await self._events.aclose()
            finally:
                self._on_close()

    async def _send_body(self, send: Send, body: bytes, more_body: bool) -> None:
        """The per-token path: an uncontended asyncio lock takes no trip through the loop."""
        async with self._sending:
            if self._complete:
                return
            self._complete = not more_body
            await send({"type": "http.response.body", "body": body, "more_body": more_body})

    async def _send_events(self, send: Send) -> None:
        async for data in self._events:
            await self._send_body(send, data, True)
        await self._send_body(send, b"", False)

    async def _ping(self, send: Send) -> None:
        """A comment every interval, so that proxies see a live connection while nothing else goes."""
        assert self._ping_interval_s is not None
        while not self._complete:
            await anyio.sleep(self._ping_interval_s)
            await self._send_body(send, self._ping_event, True)
