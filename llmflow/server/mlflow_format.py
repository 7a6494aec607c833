"""A third-party model's stream at /invocations: its chunks go out as it yields them
(`ChunkDictEncoder`: dicts or strings), one `data: <chunk json>` event each, then `data: [DONE]`;
its stream ends when the model's does. (An llmflow model's stream is a generation written by
`llmflow.wire.mlflow_chunks`, as its `predict_stream` writes it.)
"""

from __future__ import annotations

from typing import Any

from llmflow.observability import ObservedGeneration
from llmflow.server import mlflow_scoring
from llmflow.wire.mlflow_chunks import stream_error_event
from llmflow.wire.sse import event


class ChunkDictEncoder:
    """Every chunk is sent and counted as it is (the transport's `Encoder` of a stream)."""

    @staticmethod
    def opening() -> bytes:
        return b""

    @staticmethod
    def event(chunk: Any) -> bytes:
        return event(mlflow_scoring.chunk_json(chunk))

    error = staticmethod(stream_error_event)

    @staticmethod
    def watch(observed: ObservedGeneration, chunk: Any) -> bool:
        """A chunk's text times a token: a string chunk, or the `content` of a dict shaped like
        llmflow's. A model's stream has no final chunk the server knows of."""
        if isinstance(chunk, str):
            observed.text(chunk)
        else:
            content = chunk.get("content") if isinstance(chunk, dict) else None
            observed.text(content if isinstance(content, str) else "")
        return False

    def whole(self, record: Any) -> dict[str, Any]:
        raise TypeError("a third-party model's answer is MLflow's own, not a generation record")
