"""Connection-level guards that uvicorn lacks: a cap on open connections, and a time limit for a
request head.

uvicorn's `limit_concurrency` is checked only once a request head is complete: sockets that send
nothing are never refused, yet they count against the limit, so a few hundred idle sockets make
every real request a 503 while they stay open. Its keep-alive timeout runs only between two
requests, so a client that connects and sends nothing, or sends its head a byte at a time, holds
the connection for as long as it likes. This protocol closes a connection beyond the limit at
once (503), and one whose head has not arrived within the read timeout (408). The body's time
limit is `middleware.BodyLimitMiddleware`'s, where the app can answer it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmflow.errors import LlmflowError, RequestReadTimeout, TooManyConnections
from llmflow.server.error_answers import error_headers, llmflow_error_body, status_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    head_timeout_s: float
    #: told each time a connection is closed early: "connection_limit" or "head_timeout"
    on_refused: Callable[[str], None] = lambda reason: None


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with `ConnectionLimits` enforced."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._limits.max_connections:
            self._refuse(TooManyConnections(self._limits.max_connections), "connection_limit")
            return
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        """The first byte of a request: from here its head must arrive within the read timeout."""
        super().on_message_begin()
        if self._head_timer is None:
            self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        super().on_headers_complete()

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self._limits.head_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head behind an answer still being written: no room for a 408
            self._limits.on_refused("head_timeout")
            self.transport.close()
            return
        self._refuse(RequestReadTimeout(self._limits.head_timeout_s, "head"), "head_timeout")

    def _refuse(self, error: LlmflowError, reason: str) -> None:
        """Answer `error` before any request was read, and close."""
        logger.info("%s: %s", reason, error)
        self._limits.on_refused(reason)
        self.transport.write(_raw_response(error, self.server_state.default_headers))
        self.transport.close()


def _raw_response(error: LlmflowError, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    status, _ = status_of(error)
    body = json.dumps(llmflow_error_body(error)).encode()
    headers = {
        "content-type": "application/json",
        "content-length": str(len(body)),
        **{name.lower(): value for name, value in error_headers(error).items()},
        "connection": "close",
    }
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode()]
    lines += [name + b": " + value for name, value in default_headers]
    lines += [f"{name}: {value}".encode() for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
