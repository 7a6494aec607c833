"""A caller's trace, continued: the W3C `traceparent` (and `tracestate`) of an HTTP request.

An application that traces itself with MLflow sends its span's context as a `traceparent`
header (`mlflow.tracing.get_tracing_context_headers_for_http_request()`); the server's span of
that request becomes a child of the caller's span, so the application's trace and the model's
are one tree in the tracking store.

`CallerTrace.from_headers` reads the headers (a malformed `traceparent` is ignored, as the W3C
specification asks, with a log line); the server's middleware keeps it in `caller_trace` for the
request's task, and `server.pipeline.observe` hands it to the request's `RequestTrace`.
`CallerScope` starts a span as a child of the caller's, in a `contextvars.Context` of its own
(so nothing leaks into the worker thread that starts it), and keeps MLflow's distributed-tracing
context (`mlflow.tracing.set_tracing_context_from_http_request_headers`, which registers the
caller's trace in this process) open for as long as a span of that trace lives and until it is
exported: the span starts in a worker thread and ends later, elsewhere.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: version 00: trace id (32 hex digits, not all zero), parent id (16, not all zero), flags (2)
_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


@dataclass(frozen=True, slots=True)
class CallerTrace:
    """The caller's span context, as its headers carried it."""

    traceparent: str
    tracestate: str | None = None

    @classmethod
    def from_headers(cls, headers: list[tuple[bytes, bytes]]) -> CallerTrace | None:
        """The context in raw ASGI `headers`; None when there is none or it is malformed."""
        parent = state = None
        for name, value in headers:
            if name == b"traceparent":
                parent = value.decode("latin-1").strip().lower()
            elif name == b"tracestate":
                state = value.decode("latin-1").strip()
        if parent is None:
            return None
        if not _TRACEPARENT.match(parent):
            logger.warning("ignoring a malformed traceparent %r: the request starts a new trace", parent)
            return None
        return cls(parent, state or None)

    @property
    def sampled(self) -> bool:
        """The caller records its trace (the `sampled` flag)."""
        return int(self.traceparent[-2:], 16) & 1 == 1

    @property
    def trace_id(self) -> str:
        """The trace's id as 32 hex digits (MLflow's trace id is `tr-` and these)."""
        return self.traceparent[3:35]

    def headers(self) -> dict[str, str]:
        headers = {"traceparent": self.traceparent}
        if self.tracestate is not None:
            headers["tracestate"] = self.tracestate
        return headers


#: the trace context of the HTTP request being handled (set by the server's middleware)
caller_trace: contextvars.ContextVar[CallerTrace | None] = contextvars.ContextVar(
    "caller_trace", default=None
)


class CallerScope:
    """The caller's span as the current one for what runs inside `run()` (the span's start), and
    MLflow's placeholder for the caller's trace, which must stay registered until the span is
    exported: `close()` releases it (from any thread), off the calling thread."""

    __slots__ = ("_caller", "_context", "_closed")

    def __init__(self, caller: CallerTrace):
        from mlflow.tracing.provider import get_context_api  # MLflow's own context, not OTel's global one
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._caller = caller
        self._closed = False
        _REMOTE.acquire(caller)
        self._context = contextvars.Context()
        parent = TraceContextTextMapPropagator().extract(caller.headers())
        self._context.run(get_context_api().attach, parent)

    def run(self, function: Callable[..., T], *args: Any) -> T:
        return self._context.run(function, *args)

    def close(self) -> None:
        """Release MLflow's placeholder (once)."""
        if not self._closed:
            self._closed = True
            _REMOTE.release(self._caller)


class _RemoteTraces:
    """MLflow's placeholder of each caller's trace that a span of this process continues, shared
    by the requests of one trace (MLflow keeps one per trace id: a second registration would drop
    the first request's spans). The last release exports what was ended (MLflow drops a span
    whose trace is no longer registered when it exports it) and then unregisters, in a thread of
    its own: exporting writes to the tracking store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[contextvars.Context, AbstractContextManager[Any], int]] = {}

    def acquire(self, caller: CallerTrace) -> None:
        with self._lock:
            held = self._open.get(caller.trace_id)
            if held is not None:
                self._open[caller.trace_id] = (held[0], held[1], held[2] + 1)
                return
            from mlflow.tracing import set_tracing_context_from_http_request_headers

            context = contextvars.Context()
            scope = set_tracing_context_from_http_request_headers(caller.headers())
            context.run(scope.__enter__)
            self._open[caller.trace_id] = (context, scope, 1)

    def release(self, caller: CallerTrace) -> None:
        with self._lock:
            context, scope, count = self._open[caller.trace_id]
            if count > 1:
                self._open[caller.trace_id] = (context, scope, count - 1)
                return
        threading.Thread(target=self._flush_and_close, args=(caller.trace_id,), daemon=True).start()

    def _flush_and_close(self, trace_id: str) -> None:
        import mlflow

        try:
            mlflow.flush_trace_async_logging()
        except Exception:
            logger.warning("could not export the spans of trace %s", trace_id, exc_info=True)
        with self._lock:
            context, scope, count = self._open[trace_id]
            if count > 1:  # a new request of the trace came meanwhile: it keeps it
                self._open[trace_id] = (context, scope, count - 1)
                return
            del self._open[trace_id]
            context.run(scope.__exit__, None, None, None)


#: the remote traces this process's spans continue (MLflow's trace registry is per process too)
_REMOTE = _RemoteTraces()
