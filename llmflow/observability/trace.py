"""One MLflow span around one generation, started and ended explicitly, exactly once.

MLflow's own generator tracing never ends the span when a consumer stops a stream early, and the
trace is lost (mlflow issue 25790); it also stores every chunk as a span event. Here the span is
started with `mlflow.start_span_no_context` and ended by whoever sees the generation end: the
final chunk, a failure, an early close (see `ObservedStream`), or the server when a request is
over. Per chunk, only the text is appended to a list; it is joined once, at the end.

The span holds:
- inputs: the prompt or messages, and the params;
- outputs: `{"content", "finish_reason", "usage"}`, the whole answer (not a list of chunks);
- attributes: `llmflow.engine`, `llmflow.model`, `llmflow.finish_reason`, the timings
  (`llmflow.queue_ms`, `llmflow.ttft_ms`, `llmflow.e2e_ms`, `llmflow.decode_tokens_per_s`) and
  MLflow's token usage (`mlflow.chat.tokenUsage`, summed into the trace's token usage).

Status ERROR when the generation failed or timed out; OK otherwise, including a stream stopped
early (finish reason "cancelled"). Tracing never breaks a generation: MLflow errors are logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from llmflow.observability.policy import trace_experiment_id
from llmflow.timing import RequestTimings
from llmflow.types import Chunk, Usage

logger = logging.getLogger(__name__)

SPAN_TYPE_LLM = "LLM"
SPAN_TYPE_CHAT = "CHAT_MODEL"
#: outcomes (see `RequestTimings.outcome`) that make a span's status ERROR
FAILED_OUTCOMES = frozenset({"error", "timeout"})
_TIMING_KEYS = ("queue_ms", "ttft_ms", "e2e_ms", "decode_tokens_per_s")
_UNSET = object()


class RequestTrace:
    """The span of one generation. `begin()` starts it, `record()` feeds it chunks, `end()` ends
    it; `end()` after the first is a no-op, and nothing here raises."""

    __slots__ = (
        "name",
        "inputs",
        "attributes",
        "span_type",
        "parts",
        "finish_reason",
        "usage",
        "failed",
        "_result",
        "_span",
        "_ended",
    )

    def __init__(
        self,
        name: str,
        inputs: Any,
        *,
        attributes: dict[str, Any] | None = None,
        span_type: str = SPAN_TYPE_LLM,
    ):
        self.name = name
        self.inputs = inputs
        self.attributes = {k: v for k, v in (attributes or {}).items() if v is not None}
        self.span_type = span_type
        #: the answer's text chunks, appended as they pass
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        #: set when the generation failed without an exception to show (e.g. an error answer)
        self.failed = False
        self._result: Any = _UNSET
        self._span: Any = None
        self._ended = False

    @property
    def span(self) -> Any:
        """The live MLflow span (None before `begin()` or when MLflow could not start one)."""
        return self._span

    def begin(self, started: float | None = None, parent: Any = None) -> RequestTrace:
        """Start the span, back-dated to `started` (a `time.perf_counter()` reading) when given,
        as a child of `parent`, else of MLflow's active span, else as a new trace."""
        try:
            import mlflow

            if parent is None:
                parent = mlflow.get_current_active_span()
            self._span = mlflow.start_span_no_context(
                self.name,
                span_type=self.span_type,
                parent_span=parent,
                inputs=self.inputs,
                attributes=self.attributes,
                experiment_id=None if parent is not None else trace_experiment_id(),
                start_time_ns=None if started is None else wall_time_ns(started),
            )
        except Exception:
            logger.warning("could not start an MLflow trace for %s", self.name, exc_info=True)
        return self

    def record(self, chunk: Chunk) -> None:
        """One chunk of an llmflow stream."""
        if chunk.text:
            self.parts.append(chunk.text)
        else:
            self.finish_reason = chunk.finish_reason.value if chunk.finish_reason is not None else None
            self.usage = chunk.usage

    def record_any(self, chunk: Any) -> None:
        """One chunk of any pyfunc model's `predict_stream`: llmflow's `{"content", ...}` dicts
        (and other models' dicts shaped like them) or plain strings; others are not kept."""
        if isinstance(chunk, str):
            if chunk:
                self.parts.append(chunk)
            return
        if not isinstance(chunk, dict):
            return
        content = chunk.get("content")
        if isinstance(content, str) and content:
            self.parts.append(content)
        reason = chunk.get("finish_reason")
        if isinstance(reason, str):
            self.finish_reason = reason
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self.usage = Usage(prompt, completion)

    def set_result(self, result: Any, *, failed: bool = False) -> None:
        """Outputs that are not a text stream (a batch `predict`, a scoring answer)."""
        self._result = result
        self.failed = self.failed or failed

    def end(self, timings: RequestTimings | None = None, error: BaseException | None = None) -> None:
        """End the span with the outputs, timings and status; only the first call counts."""
        if self._ended:
            return
        self._ended = True
        span = self._span
        if span is None:
            return
        try:
            usage = self.usage or _usage_from(timings)
            outcome = None if timings is None else timings.outcome
            # a stream that never sent its final chunk (stopped, failed): how the request ended
            reason = self.finish_reason or outcome
            failed = self.failed or error is not None or outcome in FAILED_OUTCOMES
            if isinstance(error, Exception):
                span.record_exception(error)
            span.end(
                outputs=self._outputs(reason, usage),
                attributes=self._end_attributes(reason, usage, timings),
                status="ERROR" if failed else "OK",
                end_time_ns=_end_time_ns(timings),
            )
        except Exception:
            logger.warning("could not end the MLflow trace of %s", self.name, exc_info=True)

    def _outputs(self, reason: str | None, usage: Usage | None) -> Any:
        if self._result is not _UNSET:
            return self._result
        return {
            "content": "".join(self.parts),
            "finish_reason": reason,
            "usage": None if usage is None else usage.to_dict(),
        }

    def _end_attributes(
        self, reason: str | None, usage: Usage | None, timings: RequestTimings | None
    ) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if reason is not None:
            attributes["llmflow.finish_reason"] = reason
        if timings is not None:
            values = timings.to_dict()
            attributes.update({f"llmflow.{k}": values[k] for k in _TIMING_KEYS if values[k] is not None})
        if usage is not None:
            attributes["mlflow.chat.tokenUsage"] = {
                "input_tokens": usage.prompt_tokens,
                "output_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            }
        return attributes


def watch_chunks(trace: RequestTrace, chunks: Iterator[Chunk], started: float) -> Iterator[Chunk]:
    """`chunks`, recorded into `trace` as they pass. The span begins (back-dated to `started`)
    in the thread that runs this, the server's worker: nothing of MLflow's runs on the loop but
    the end."""
    trace.begin(started)
    record = trace.record
    try:
        for chunk in chunks:
            record(chunk)
            yield chunk
    finally:
        close_iterator(chunks)


def watch_model_stream(
    trace: RequestTrace, make_iterator: Callable[[], Iterator[Any]], started: float
) -> Iterator[Any]:
    """A pyfunc model's stream (or its one `predict` answer), recorded into `trace`, run with the
    span active so that a model which traces itself (an llmflow model) nests its span under it:
    one trace per request. The generator is created, iterated and closed in one worker thread,
    so the span is active only there, and only while it runs."""
    trace.begin(started)
    with _active(trace.span):
        chunks = make_iterator()
        record = trace.record_any
        try:
            for chunk in chunks:
                record(chunk)
                yield chunk
        finally:
            close_iterator(chunks)


def _active(span: Any) -> AbstractContextManager[Any]:
    if span is None:
        return nullcontext()
    try:
        from mlflow.tracing.provider import safe_set_span_in_context
    except ImportError:  # pragma: no cover - an MLflow without it: spans do not nest
        return nullcontext()
    return safe_set_span_in_context(span)


def close_iterator(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def wall_time_ns(perf_counter_time: float) -> int:
    """A `time.perf_counter()` reading as wall-clock nanoseconds, as spans want them."""
    return time.time_ns() - int((time.perf_counter() - perf_counter_time) * 1e9)


def _end_time_ns(timings: RequestTimings | None) -> int | None:
    """When the timings say the request finished, so that the span lasts e2e_ms."""
    return None if timings is None or timings.finished is None else wall_time_ns(timings.finished)


def _usage_from(timings: RequestTimings | None) -> Usage | None:
    if timings is None or timings.prompt_tokens is None or timings.completion_tokens is None:
        return None
    return Usage(timings.prompt_tokens, timings.completion_tokens)
