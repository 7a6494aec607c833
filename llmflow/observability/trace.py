"""One MLflow span around one generation, started and ended explicitly, exactly once.

MLflow's own generator tracing never ends the span when a consumer stops a stream early, and the
trace is lost (mlflow issue 25790); it also stores every chunk as a span event. Here the span is
started with `mlflow.start_span_no_context` and ended by the generation's record
(`observed.ObservedGeneration`) when it ends, with its timings, usage and outcome. Per chunk, only
the text is appended to a list; it is joined once, at the end.

The span holds:
- inputs: the prompt or messages, and the params;
- outputs: `{"content", "finish_reason", "usage"}`, the whole answer (not a list of chunks);
- attributes: `llmflow.engine`, `llmflow.model`, `llmflow.finish_reason`, the timings
  (`llmflow.queue_ms`, `llmflow.ttft_ms`, `llmflow.e2e_ms`, `llmflow.decode_tokens_per_s`) and
  MLflow's token usage (`mlflow.chat.tokenUsage`, summed into the trace's token usage).

Status ERROR when the generation failed or timed out; OK otherwise, including a stream stopped
early (finish reason "cancelled"). Tracing never breaks a generation: MLflow errors are logged.

With a `caller` (the `traceparent` of the HTTP request, `propagation.CallerTrace`), the span is a
child of the caller's span in the caller's trace rather than the root of a new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from llmflow.observability.policy import trace_experiment_id
from llmflow.observability.propagation import CallerScope, CallerTrace
from llmflow.observability.timings import RequestTimings
from llmflow.types import Usage

logger = logging.getLogger(__name__)

SPAN_TYPE_LLM = "LLM"
SPAN_TYPE_CHAT = "CHAT_MODEL"
#: outcomes (see `RequestTimings.outcome`) that make a span's status ERROR
FAILED_OUTCOMES = frozenset({"error", "timeout"})
_TIMING_KEYS = ("queue_ms", "ttft_ms", "e2e_ms", "decode_tokens_per_s")
_UNSET = object()


@dataclass(slots=True, eq=False)
class RequestTrace:
    """The span of one generation. `begin()` starts it, `record()` feeds it chunks, `end()` ends
    it; `end()` after the first is a no-op, and nothing here raises."""

    name: str
    inputs: Any
    _: KW_ONLY
    #: the span's attributes at its start (those that are None are left out)
    attributes: dict[str, Any] = field(default_factory=dict)
    span_type: str = SPAN_TYPE_LLM
    #: the caller's trace to continue (a request's `traceparent`), or None
    caller: CallerTrace | None = None
    #: the answer's text chunks, appended as they pass
    parts: list[str] = field(default_factory=list, init=False)
    #: set when the generation failed without an exception to show (e.g. an error answer)
    failed: bool = field(default=False, init=False)
    #: the live MLflow span (None before `begin()` or when MLflow could not start one)
    span: Any = field(default=None, init=False)
    _result: Any = field(default=_UNSET, init=False)
    _ended: bool = field(default=False, init=False)
    _scope: CallerScope | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.attributes = {k: v for k, v in self.attributes.items() if v is not None}

    def begin(self, started: float | None = None, parent: Any = None) -> RequestTrace:
        """Start the span, back-dated to `started` (a `time.perf_counter()` reading) when given,
        as a child of `parent`, else of MLflow's active span, else of the caller's span, else as
        a new trace."""
        try:
            import mlflow

            if parent is None:
                parent = mlflow.get_current_active_span()
            if parent is None and self.caller is not None:
                self._scope = CallerScope(self.caller)
                self.span = self._scope.run(self._start, mlflow, started, None)
            else:
                self.span = self._start(mlflow, started, parent)
        except Exception:
            logger.warning("could not start an MLflow trace for %s", self.name, exc_info=True)
            if self._scope is not None:
                self._scope.close()
        return self

    def _start(self, mlflow: Any, started: float | None, parent: Any) -> Any:
        """The span, a child of `parent`, else of the current context (the caller's span inside
        its scope), else a new trace's root."""
        root = parent is None and self._scope is None
        return mlflow.start_span_no_context(
            self.name,
            span_type=self.span_type,
            parent_span=parent,
            inputs=self.inputs,
            attributes=self.attributes,
            experiment_id=trace_experiment_id() if root else None,
            start_time_ns=None if started is None else wall_time_ns(started),
        )

    def set_result(self, result: Any, *, failed: bool = False) -> None:
        """Outputs that are not a text stream (a batch `predict`, a scoring answer)."""
        self._result = result
        self.failed = self.failed or failed

    def end(self, timings: RequestTimings | None = None, error: BaseException | None = None) -> None:
        """End the span with the outputs, timings and status; only the first call counts."""
        if self._ended:
            return
        self._ended = True
        span = self.span
        if span is None:
            return
        try:
            usage = _usage_from(timings)
            # the finish reason, or how a request ended that never sent its final chunk
            reason = None if timings is None else timings.outcome
            failed = self.failed or error is not None or reason in FAILED_OUTCOMES
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
        finally:
            if self._scope is not None:
                self._scope.close()

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
            attributes["llmflow.cached_tokens"] = usage.cached_tokens
            if usage.draft_tokens:  # the answer was decoded with speculation
                attributes["llmflow.draft_tokens"] = usage.draft_tokens
                attributes["llmflow.accepted_draft_tokens"] = usage.accepted_draft_tokens
        return attributes


def traced(trace: RequestTrace, make_iterator: Callable[[], Iterator[Any]], started: float) -> Iterator[Any]:
    """`make_iterator()`'s items, made and iterated with `trace`'s span begun (back-dated to
    `started`) and active, so that a model which traces itself (an llmflow pyfunc model) nests its
    span under it: one trace per request. Run in the server's worker thread, which creates,
    iterates and closes the iterator: nothing of MLflow's runs on the event loop but the end."""
    trace.begin(started)
    with _active(trace.span):
        items = make_iterator()
        try:
            yield from items
        finally:
            close_iterator(items)


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
    return Usage(
        timings.prompt_tokens,
        timings.completion_tokens,
        timings.cached_tokens or 0,
        timings.draft_tokens,
        timings.accepted_draft_tokens,
    )
