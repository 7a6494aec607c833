"""Plain ASGI middleware (no BaseHTTPMiddleware: it would buffer streams and break disconnects):
API-key check, request body limit, and counting responses by status."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmflow.errors import LlmflowError, RequestTooLarge, Unauthorized
from llmflow.server.error_answers import error_response

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def _answer(error: LlmflowError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(error)(scope, receive, send)


class ApiKeyMiddleware:
    """Every path but the public ones needs `Authorization: Bearer <key>`; compared in constant time."""

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
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)
        return False


class BodyLimitMiddleware:
    """Reads a request body up to `limit` bytes (413 beyond), then hands it to the app in one piece.
    Later `receive` calls go to the client again, so disconnects are still seen."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        if self._declared_length(scope) > self.limit:
            await _answer(RequestTooLarge(self.limit), scope, receive, send)
            return
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await _answer(RequestTooLarge(self.limit), scope, receive, send)
                return
            parts.append(body)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(parts), receive), send)

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


class ResponseCounterMiddleware:
    """Counts every HTTP response by endpoint (known paths only, to bound the label set) and status."""

    def __init__(
        self, app: ASGIApp, count: Callable[[str, int], None], known_paths: Callable[[], Collection[str]]
    ):
        self.app = app
        self._count = count
        self._known_paths = known_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = path if path in self._known_paths() else "other"
        started = False

        async def count_and_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True  # counted before the client can see the answer
                self._count(endpoint, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, count_and_send)
        finally:
            if not started:  # failed before answering: the server error handler's 500
                self._count(endpoint, 500)
