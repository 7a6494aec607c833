"""The ingress: the ASGI app behind Ray Serve's HTTP proxy. It reads a request, sends it to one
model replica (Ray's router picks the least loaded of two) and relays the replica's messages as
they come, so streams stay streams.

It owns what only something outside the replica can do: a replica that dies before answering
is retried once on another, one that dies mid-stream ends the stream with an error event (not a
cut connection or a hang), and a client that leaves cancels the replica's call (the replica then
frees the sequence)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ray.exceptions import RayActorError, RayError
from ray.serve.exceptions import RequestCancelledError
from starlette.types import Message, Receive, Scope, Send

from llmflow.errors import LlmflowError, ReplicaLost, RequestTooLarge
from llmflow.ray.bridge import portable_scope
from llmflow.server.error_answers import error_response, sse_error_event_for
from llmflow.server.middleware import read_body

logger = logging.getLogger(__name__)

#: a request whose replica died before it answered is sent to another this many times more
RETRIES = 1


class Ingress:
    """An ASGI app forwarding every HTTP request to the model deployment `replicas`."""

    def __init__(self, replicas: Any, max_body_bytes: int):
        self._replicas = replicas.options(stream=True)
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await self._forward(scope, receive, send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, self._max_body_bytes)
        except RequestTooLarge as exc:  # answered here: no replica need read it
            await _send_error(scope["path"], exc, send)
            return
        if body is None:
            return  # the client left while sending
        relay = _Relay(scope["path"], send)
        for attempt in range(RETRIES + 1):
            call = self._replicas.handle.remote(portable_scope(scope), body)
            watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, call))
            try:
                async for batch in call:
                    await relay.send_all(batch)
                return
            except RayActorError as exc:
                if relay.started or attempt == RETRIES:
                    await relay.fail(ReplicaLost(type(exc).__name__))
                    return
                logger.warning("a model replica died before answering; sending the request to another")
            except RequestCancelledError:
                return  # the client left: nobody to answer
            except RayError as exc:
                await relay.fail(ReplicaLost(f"{type(exc).__name__}: {exc}"))
                return
            finally:
                watcher.cancel()
                if not relay.complete:
                    call.cancel()


class _Relay:
    """The client's side of one response: what was sent, and how to end it on a failure."""

    def __init__(self, path: str, send: Send):
        self._path = path
        self._send = send
        self.started = False
        self.complete = False
        self._streaming = False

    async def send_all(self, batch: list[Message]) -> None:
        for message in batch:
            if message["type"] == "http.response.start":
                self.started = True
                self._streaming = any(
                    name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                    for name, value in message.get("headers", [])
                )
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                self.complete = True
            await self._send(message)

    async def fail(self, error: ReplicaLost) -> None:
        """End the response with `error`: a whole error answer when nothing was sent yet, an
        error event when a stream was under way, else just the end of the body."""
        logger.warning("%s (%s)", error, self._path)
        if not self.started:
            await _send_error(self._path, error, self._send)
        elif not self.complete:
            tail = sse_error_event_for(self._path, error) if self._streaming else b""
            await self._send({"type": "http.response.body", "body": tail, "more_body": False})
        self.complete = True


async def _send_error(path: str, error: LlmflowError, send: Send) -> None:
    """A whole error answer, in the shape the clients of `path` read."""
    response = error_response(error, path)
    await send(
        {"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers}
    )
    await send({"type": "http.response.body", "body": response.body, "more_body": False})


async def _cancel_on_disconnect(receive: Receive, call: Any) -> None:
    with contextlib.suppress(Exception):
        while (await receive())["type"] != "http.disconnect":
            pass
        call.cancel()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
