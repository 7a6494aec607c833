"""Observability: per-generation timings and MLflow traces, owned by one record per generation.

- `timings`: `RequestTimings`, one request's clock readings (the numbers behind /metrics, the
  `timings` objects, traces and the CLI's summary line);
- `trace`: `RequestTrace`, one explicitly ended MLflow span per generation;
- `observed`: `ObservedGeneration`, the record that owns both and ends them once, and
  `ObservedStream` / `ObservedEvents`, an in-process stream of chunks / a generation's events
  observed as its consumer reads it;
- `policy`: when tracing is on (off unless asked, or unless an MLflow experiment was chosen).
"""

from llmflow.observability.observed import ObservedEvents, ObservedGeneration, ObservedStream
from llmflow.observability.policy import tracing_wanted
from llmflow.observability.timings import RequestTimings
from llmflow.observability.trace import RequestTrace, traced

__all__ = [
    "ObservedEvents",
    "ObservedGeneration",
    "ObservedStream",
    "RequestTimings",
    "RequestTrace",
    "traced",
    "tracing_wanted",
]
