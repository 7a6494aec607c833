"""Server-sent events: framing, and a response that always releases its generation.

Events are pre-encoded bytes (`data: <json>\\n\\n`); JSON never holds a raw newline, so one
`data:` line per event is always right. sse-starlette runs the response: pings, and cancelling
the stream when the client disconnects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
from sse_starlette import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
PING_INTERVAL_S = 15


def event(payload_json: str) -> bytes:
    return b"data: " + payload_json.encode() + b"\n\n"


class StreamResponse(EventSourceResponse):
    """An SSE response that calls `on_close` however it ends, even when the client left before
    the first byte (then the body iterator never starts, so its own `finally` would not run)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]):
        super().__init__(content, ping=PING_INTERVAL_S, sep="\n")
        self._on_close = on_close

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        """No per-send timeout is set, so skip the cancel scope sse-starlette opens for each event
        (tens of microseconds per token)."""
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)

    async def _listen_for_exit_signal_with_grace(self) -> None:
        """Shutdown is the server's job (`runner.GracefulServer`): after its grace period it ends
        the generations, so streams close with their final events. sse-starlette's own drain
        would cut them mid-answer on SIGTERM."""
        await anyio.sleep_forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
