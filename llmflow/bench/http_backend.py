"""Requests to an OpenAI-compatible streaming endpoint, timed from SSE arrival times.

Every failure becomes a `RequestError` on the request's record, with what was measured
before it kept: a benchmark reports a broken server, it does not crash on one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from llmflow.bench.openai_chunks import StreamErrorEvent, error_message, parse_event
from llmflow.bench.records import ErrorKind, RequestRecord, RequestSpec
from llmflow.bench.sse import MalformedSSE, SSEEvent, SSEParser, clip
from llmflow.errors import InvalidRequest

APIS = ("chat", "completions")
_ENDPOINT_PATHS = {"chat": "/chat/completions", "completions": "/completions"}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: `base` is the OpenAI base URL (…/v1), `url` the endpoint itself."""

    base: str
    url: str
    api: str


def resolve_endpoint(url: str, api: str = "chat") -> Endpoint:
    """Accept a base URL (`http://host:port/v1`, or `http://host:port`, which means `/v1`) or
    a full endpoint URL (whose path then decides the API)."""
    if api not in APIS:
        raise InvalidRequest.single("api", f"must be one of {', '.join(APIS)}, not {api!r}")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise InvalidRequest.single("url", f"{url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidRequest.single(
            "url", f"{url!r} is not an http(s) URL; expected something like http://127.0.0.1:8080/v1"
        )
    path = parsed.path.rstrip("/")
    for name, suffix in _ENDPOINT_PATHS.items():
        if path.endswith(suffix) and not (name == "completions" and path.endswith("/chat/completions")):
            base = str(parsed.copy_with(path=path[: -len(suffix)] or "/")).rstrip("/")
            return Endpoint(base, str(parsed.copy_with(path=path)), name)
    base = str(parsed.copy_with(path=path or "/v1")).rstrip("/")
    return Endpoint(base, base + _ENDPOINT_PATHS[api], api)


@dataclass(frozen=True, slots=True)
class HttpOptions:
    model: str | None = None
    temperature: float = 0.0
    api_key: str | None = None
    timeout_s: float = 300.0
    #: ask for `stream_options.include_usage` (retried without it if the server refuses)
    request_usage: bool = True
    #: merged into every request body (server-specific fields such as `ignore_eos`)
    extra_body: dict[str, Any] = field(default_factory=dict)


class _Failed(Exception):
    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Unanswered(httpx.RemoteProtocolError):
    """The server closed the connection before any byte of a response (a kept-alive
    connection it had dropped): the request never reached it, so it may be sent again. Not
    caught, it is the transport error it wraps."""


class _UsageRejected(Exception):
    def __init__(self, failure: _Failed):
        super().__init__(failure.message)
        self.failure = failure


class HttpBackend:
    """Streams requests with one shared connection pool, unlimited so that the pool never
    caps concurrency. Proxies from the environment are ignored: they would be measured too."""

    def __init__(self, endpoint: Endpoint, options: HttpOptions):
        self.endpoint = endpoint
        self.options = options
        #: set once the server refused `stream_options` and accepted the same request without it
        self.usage_rejected = False
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(options.timeout_s, connect=min(options.timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch_model_id(self) -> str | None:
        """The first model the server lists at /models, or None when it lists none."""
        try:
            response = await self._client.get(self.endpoint.base + "/models", timeout=10.0)
            data = response.json().get("data") if response.status_code == 200 else None
            first = data[0] if isinstance(data, list) and data else None
            return str(first["id"]) if isinstance(first, dict) and "id" in first else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    async def run(self, spec: RequestSpec) -> RequestRecord:
        include_usage = self.options.request_usage and not self.usage_rejected
        record = RequestRecord(spec.index, spec_prompt_tokens=spec.prompt_tokens)
        try:
            try:
                await self._stream_resending_once(spec, record, include_usage)
            except _UsageRejected as rejected:
                record = RequestRecord(spec.index, spec_prompt_tokens=spec.prompt_tokens)
                await self._retry_without_usage(spec, record, rejected.failure)
        except _Failed as exc:
            record.fail(exc.kind, exc.message)
        except MalformedSSE as exc:
            record.fail(ErrorKind.MALFORMED_SSE, f"malformed SSE stream from {self.endpoint.url}: {exc}")
        except StreamErrorEvent as exc:
            record.fail(ErrorKind.STREAM_ERROR, f"the server sent an error mid-stream: {exc}")
        except httpx.HTTPError as exc:
            record.fail(*classify_transport_error(exc, self.endpoint.url, self.options.timeout_s))
        finally:
            if record.ended_at is None:
                record.ended_at = time.perf_counter()
        return record

    async def _stream_resending_once(
        self, spec: RequestSpec, record: RequestRecord, include_usage: bool
    ) -> None:
        """Send again, once, a request the server dropped unanswered, as HTTP clients (the
        `openai` client among them) do with a pooled connection the server had closed. The
        record keeps the first send time, so the lost attempt counts in its TTFT, and says
        `resent`."""
        record.sent_at = time.perf_counter()
        try:
            await self._stream(spec, record, include_usage)
        except _Unanswered:
            record.resent = True
            await self._stream(spec, record, include_usage)

    async def _retry_without_usage(self, spec: RequestSpec, record: RequestRecord, first: _Failed) -> None:
        try:
            await self._stream_resending_once(spec, record, include_usage=False)
        except _Failed as exc:
            if exc.kind is ErrorKind.HTTP_STATUS:
                raise first from None  # the refusal was not about stream_options
            raise
        self.usage_rejected = True

    async def _stream(self, spec: RequestSpec, record: RequestRecord, include_usage: bool) -> None:
        body = self._body(spec, include_usage)
        answered = False
        try:
            async with self._client.stream("POST", self.endpoint.url, json=body) as response:
                answered = True
                await self._read_response(response, record, include_usage)
        except httpx.RemoteProtocolError as exc:
            if answered:
                raise
            raise _Unanswered(str(exc)) from exc

    async def _read_response(
        self, response: httpx.Response, record: RequestRecord, include_usage: bool
    ) -> None:
        if not response.is_success:
            failure = await self._status_failure(response)
            if include_usage and response.status_code in (400, 422):
                raise _UsageRejected(failure)
            raise failure
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            raise _Failed(
                ErrorKind.NOT_STREAMING,
                f"{self.endpoint.url} answered with one JSON body ({content_type}) instead of an "
                'SSE stream (text/event-stream): the server does not stream or ignored "stream": true',
            )
        await self._read_events(response, record)

    async def _read_events(self, response: httpx.Response, record: RequestRecord) -> None:
        parser = SSEParser()
        done = False
        async for line in response.aiter_lines():
            if done:
                continue  # read to the end so that the connection can be reused
            event = parser.feed(line, time.perf_counter())
            if event is not None and _apply(event, record):
                done = True
                record.ended_at = event.received_at
        if not done:
            event = parser.close()
            done = event is not None and _apply(event, record)
        if not done:
            record.ended_at = time.perf_counter()
            if record.finish_reason is None:  # some servers omit [DONE]; a finish_reason is enough
                raise _Failed(ErrorKind.INCOMPLETE, "the stream ended before a finish_reason or [DONE]")

    async def _status_failure(self, response: httpx.Response) -> _Failed:
        raw = (await response.aread())[:4000].decode("utf-8", errors="replace")
        try:
            message = error_message(json.loads(raw))
        except ValueError:
            message = clip(raw.strip(), 300) if raw.strip() else response.reason_phrase
        hint = ""
        if response.status_code == 404:
            hint = " (is the URL right? it should be an OpenAI base URL such as http://127.0.0.1:8080/v1)"
        return _Failed(
            ErrorKind.HTTP_STATUS, f"HTTP {response.status_code} from {self.endpoint.url}: {message}{hint}"
        )

    def _body(self, spec: RequestSpec, include_usage: bool) -> dict[str, Any]:
        options = self.options
        body: dict[str, Any] = {"stream": True, "max_tokens": spec.max_tokens}
        body["temperature"] = options.temperature
        if options.model:
            body["model"] = options.model
        if self.endpoint.api == "chat":
            body["messages"] = spec.as_messages()
        else:
            body["prompt"] = spec.as_prompt()
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(options.extra_body)
        return body


def _apply(event: SSEEvent, record: RequestRecord) -> bool:
    """Record one event; True when it is the end of the stream (`[DONE]`)."""
    if event.event == "ping":
        return False
    delta = parse_event(event)
    if delta is None:
        return True
    if delta.text:
        record.arrivals.append(event.received_at)
        record.parts.append(delta.text)
    if delta.finish_reason:
        record.finish_reason = delta.finish_reason
    if delta.completion_tokens is not None:
        record.usage_output_tokens = delta.completion_tokens
    if delta.prompt_tokens is not None:
        record.usage_prompt_tokens = delta.prompt_tokens
    return False


def classify_transport_error(exc: httpx.HTTPError, url: str, timeout_s: float) -> tuple[ErrorKind, str]:
    """A transport failure as an error kind and a message that says what to check."""
    reason = _root_cause(exc)
    if isinstance(exc, httpx.ConnectTimeout):
        return ErrorKind.CONNECT, f"timed out connecting to {url}: is the host reachable?"
    if isinstance(exc, httpx.ConnectError):
        return ErrorKind.CONNECT, f"cannot connect to {url} ({reason}): is the server running?"
    if isinstance(exc, httpx.TimeoutException):
        return ErrorKind.TIMEOUT, f"no data from {url} for {timeout_s:g} s"
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return ErrorKind.INVALID_URL, f"cannot request {url}: {reason}"
    return ErrorKind.INCOMPLETE, f"the connection to {url} broke mid-stream ({reason})"


def _root_cause(exc: BaseException) -> str:
    """httpx wraps OS errors ("All connection attempts failed"); the OS error says more."""
    inner: BaseException | None = exc
    for _ in range(6):
        if inner is None:
            break
        if isinstance(inner, OSError) and isinstance(inner.errno, int) and inner.errno > 0:
            return os.strerror(inner.errno)  # asyncio's strerror is "Connect call failed (…)"
        if isinstance(inner, OSError) and inner.strerror:
            return inner.strerror  # resolver errors have negative codes
        inner = inner.__cause__ or inner.__context__
    return str(exc) or type(exc).__name__
