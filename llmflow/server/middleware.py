"""Plain ASGI middleware (no BaseHTTPMiddleware: it would buffer streams and break disconnects):
API-key check, request body limit and read timeout, counting requests by status, and the
caller's trace context (`traceparent`)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmflow.errors import LlmflowError, RequestReadTimeout, RequestTooLarge, Unauthorized
from llmflow.observability.propagation import CallerTrace, caller_trace
from llmflow.server.error_answers import error_response
from llmflow.server.model_registry import MODEL_KEY

logger = logging.getLogger(__name__)

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def _answer(error: LlmflowError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(error, scope["path"])(scope, receive, send)


class ApiKeyMiddleware:
    """Every path but the public ones needs the key, as `Authorization: Bearer <key>` or
    `x-api-key: <key>`; compared in constant time."""

    def __init__(self, app: ASGIApp, api_key: str, public_paths: Callable[[], Collection[str]]):
        self.app = app
        self._key = api_key.encode()
        self._public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._public_paths() or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _answer(Unauthorized(), scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        """`Authorization: Bearer <key>`, or `x-api-key: <key>` (as Anthropic's clients send it)."""
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key):
                    return True
            elif name == b"x-api-key" and hmac.compare_digest(value.strip(), self._key):
                return True
        return False


class TraceContextMiddleware:
    """A request's `traceparent` / `tracestate` as `caller_trace` for the request's task, where
    `pipeline.observe` reads it. Without the header: one scan of the header list."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = CallerTrace.from_headers(scope["headers"]) if scope["type"] == "http" else None
        if caller is None:
            await self.app(scope, receive, send)
            return
        token = caller_trace.set(caller)
        try:
            await self.app(scope, receive, send)
        finally:
            caller_trace.reset(token)


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """A request's whole body; None when the client left first; `RequestTooLarge` past `limit`."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise RequestTooLarge(limit)
        parts.append(body)
        if not message.get("more_body", False):
            return b"".join(parts)


class BodyLimitMiddleware:
    """Reads a request body up to `limit` bytes (413 beyond) within `read_timeout_s` (408 after),
    then hands it to the app in one piece. Later `receive` calls go to the client again, so
    disconnects are still seen."""

    def __init__(self, app: ASGIApp, limit: int, read_timeout_s: float):
        self.app = app
        self.limit = limit
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        if self._declared_length(scope) > self.limit:
            await _answer(RequestTooLarge(self.limit), scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(read_body(receive, self.limit), self.read_timeout_s)
        except (RequestTooLarge, TimeoutError, asyncio.TimeoutError) as exc:
            error = exc if isinstance(exc, RequestTooLarge) else RequestReadTimeout(self.read_timeout_s)
            await _answer(error, scope, receive, send)
            return
        if body is None:  # the client left while sending it
            return
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    def _declared_length(scope: Scope) -> int:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0


def _replay(body: bytes, receive: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


#: nginx's status for "the client closed the connection before the answer was complete"
CLIENT_CLOSED = 499


class ResponseCounterMiddleware:
    """Counts every HTTP request by endpoint (known paths only, to bound the label set), status
    and the model that answered it (empty when none did), once, when its answer is complete.

    A client that leaves before its answer is complete (while sending the body, while queued, in
    the middle of a stream) counts as 499, never as a server error; an app that raises, or ends
    without answering, counts as 500 (the error handler logs it)."""

    def __init__(
        self,
        app: ASGIApp,
        count: Callable[[str, int, str], None],
        known_paths: Callable[[], Collection[str]],
    ):
        self.app = app
        self._count = count
        self._known_paths = known_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        exchange = _Exchange(scope, path if path in self._known_paths() else "other", self._count)

        async def watch_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                exchange.client_left = True
            return message

        async def count_and_send(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                exchange.status = message["status"]
            elif kind == "http.response.body" and not message.get("more_body", False):
                exchange.record(exchange.status or 500)  # the last part: counted before the client sees it
            try:
                await send(message)
            except OSError:  # the connection is gone
                exchange.client_left = True
                raise

        try:
            await self.app(scope, watch_receive, count_and_send)
        finally:
            exchange.record(500)  # no complete answer: a server failure, unless the client left


@dataclass(slots=True)
class _Exchange:
    """One request's answer, as far as the client got it; counted once."""

    scope: Scope
    endpoint: str
    count: Callable[[str, int, str], None]
    status: int | None = None
    client_left: bool = False
    counted: bool = False

    def record(self, status: int) -> None:
        """Count the answer (the first call wins) as `status`, or as 499 when the client left first."""
        if self.counted:
            return
        self.counted = True
        if self.client_left:
            status = CLIENT_CLOSED
            logger.info(
                "%s %s: the client closed the connection first", self.scope["method"], self.scope["path"]
            )
        self.count(self.endpoint, status, self.scope.get(MODEL_KEY, ""))
