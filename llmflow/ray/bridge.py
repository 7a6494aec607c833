"""ASGI across a Ray call: the ingress sends a request's scope and body to a model replica, the
replica runs llmflow's app on them and streams the app's ASGI messages back in batches.

Both ends speak plain ASGI, so everything the app does (routes, errors, SSE, 429s) crosses
unchanged; only the transport differs from uvicorn's. A batch holds the messages the app sent
while the previous one was on its way, so a fast stream costs fewer Ray round trips than tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import ASGIApp, Message, Scope

#: the scope keys a replica needs; the rest (the ingress's app, its state, its extensions) stays
_SCOPE_KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "root_path",
    "query_string",
    "headers",
    "client",
    "server",
)
#: a client gone, the app gets this long to end its generation by itself before it is cancelled
DISCONNECT_GRACE_S = 5.0


def portable_scope(scope: Scope) -> dict[str, Any]:
    """The part of an HTTP scope that can travel to another process (and means the same there)."""
    portable = {key: scope[key] for key in _SCOPE_KEYS if key in scope}
    portable["headers"] = [(bytes(name), bytes(value)) for name, value in scope.get("headers", [])]
    return portable


async def run_asgi(
    app: ASGIApp, scope: dict[str, Any], body: bytes, extra_headers: list[tuple[bytes, bytes]] = ()
) -> AsyncIterator[list[Message]]:
    """Run `app` on one request; yield its messages in batches until the response is complete.

    Closing the iterator early (the caller left: Ray cancels the call) reads as a client
    disconnect to the app, which then frees its sequence as it does under uvicorn."""
    outbox: asyncio.Queue[Message | None] = asyncio.Queue()
    left = asyncio.Event()
    body_sent = False

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start" and extra_headers:
            message = {**message, "headers": [*message.get("headers", []), *extra_headers]}
        outbox.put_nowait(message)

    task = asyncio.ensure_future(app(dict(scope), receive, send))
    task.add_done_callback(lambda _: outbox.put_nowait(None))
    try:
        finished = False
        while not finished:
            batch = [await outbox.get()]
            while not outbox.empty():
                batch.append(outbox.get_nowait())
            finished = batch[-1] is None
            messages = [message for message in batch if message is not None]
            if messages:
                yield messages
        await task  # the app's own exception, if any, goes to the caller
    finally:
        if not task.done():
            left.set()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), DISCONNECT_GRACE_S)
            task.cancel()
