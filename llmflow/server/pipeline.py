"""A request's record (`observe`: timings and, when tracing is wanted, an MLflow trace).
Generations of one request are served by `transport`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from llmflow.media.redact import without_image_data
from llmflow.observability import ObservedGeneration, RequestTimings, RequestTrace, tracing_wanted
from llmflow.observability.propagation import caller_trace
from llmflow.observability.trace import SPAN_TYPE_LLM
from llmflow.server.state import ModelState

logger = logging.getLogger(__name__)


def observe(
    state: ModelState,
    timings: RequestTimings,
    name: str,
    inputs: Callable[[], Any],
    *choices: bool | None,
    span_type: str = SPAN_TYPE_LLM,
) -> ObservedGeneration:
    """The record of one request, with an MLflow trace (span `name`, its inputs the request) when
    tracing is wanted: `choices` (a call's `trace` param, the model's setting) first, then the
    server's setting, then the auto rule, which a caller's sampled `traceparent` turns on. With a
    `traceparent`, the span continues the caller's trace."""
    caller = caller_trace.get()
    if not tracing_wanted(*choices, state.settings.tracing, True if caller and caller.sampled else None):
        return ObservedGeneration(timings)
    attributes = {"llmflow.engine": state.served.engine_name, "llmflow.model": state.served.name}
    recorded = without_image_data(inputs())  # an inline image's bytes stay out of the trace
    trace = RequestTrace(name, recorded, attributes=attributes, span_type=span_type, caller=caller)
    return ObservedGeneration(timings, trace)
