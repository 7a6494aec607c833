"""Observability: MLflow traces of generations and per-request timings.

- `policy`: when tracing is on (off unless asked, or unless an MLflow experiment was chosen);
- `trace`: `RequestTrace`, one explicitly ended MLflow span per generation;
- `stream`: `ObservedStream`, an in-process stream timed and traced as its consumer reads it.

The numbers are `llmflow.timing.RequestTimings`, the same ones behind the server's metrics.
"""

from llmflow.observability.policy import tracing_wanted
from llmflow.observability.stream import ObservedStream
from llmflow.observability.trace import RequestTrace, watch_chunks, watch_model_stream

__all__ = ["ObservedStream", "RequestTrace", "tracing_wanted", "watch_chunks", "watch_model_stream"]
