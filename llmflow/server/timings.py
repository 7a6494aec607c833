"""When things happened to one request: the numbers behind the server's latency histograms.

Filled on the event loop as chunks are handed to the client, so they measure what a client sees
(queue, thread handoff and all), not just the engine. The class lives in `llmflow.timing`, so that
in-process streams (`predict_stream`) and traces measure the same way.
"""

from llmflow.timing import RequestTimings

__all__ = ["RequestTimings"]
