"""MLflow's streaming wire format at /invocations: one `data: <chunk json>` event per
`predict_stream` chunk, then `data: [DONE]` (the format Databricks Model Serving uses).

An llmflow model's stream is llmflow's own chunks, written as its `predict_stream` writes them
(`LlmflowChunkFormat`: `{"content"}` dicts, then `{"content": "", "finish_reason", "usage"}`, with
the request's `timings` when asked: the server's numbers, queue included, as /metrics). A
third-party model's chunks go out as it yields them (`ChunkDictFormat`: dicts or strings); its
stream ends when the model's does.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.exceptions import MlflowException

from llmflow.errors import LlmflowError
from llmflow.mlflow.model import chunk_from_dict, chunk_to_dict
from llmflow.observability import RequestTimings
from llmflow.server import mlflow_scoring
from llmflow.server.error_answers import error_body, llmflow_error_body
from llmflow.server.event_stream import event
from llmflow.server.pipeline import ChunkFormat
from llmflow.types import Chunk


def stream_error_event(error: Exception) -> bytes:
    """After streaming began: an error event in OpenAI's shape, as every error event of the server."""
    return event(json.dumps(_stream_error_body(error), ensure_ascii=False))


def _stream_error_body(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, LlmflowError):
        return llmflow_error_body(exc)
    if isinstance(exc, MlflowException):
        return error_body(exc.message, "invalid_request_error", str(exc.error_code))
    return error_body(
        f"the model failed while streaming: {type(exc).__name__}: {exc}", "server_error", "model_error"
    )


class ChunkDictFormat(ChunkFormat):
    """`WireFormat` of a third-party model's chunks: every chunk is sent and counted as it is."""

    @staticmethod
    def final_of(chunk: Any) -> Chunk | None:
        return None

    @staticmethod
    def text_of(chunk: Any) -> str:
        """A string chunk, or the `content` of a dict shaped like llmflow's; "" for others."""
        if isinstance(chunk, str):
            return chunk
        content = chunk.get("content") if isinstance(chunk, dict) else None
        return content if isinstance(content, str) else ""

    @staticmethod
    def item(chunk: Any) -> bytes:
        return event(mlflow_scoring.chunk_json(chunk))

    def final(self, chunk: Any, final: Chunk, timings: RequestTimings) -> bytes:
        return self.item(chunk)

    error = staticmethod(stream_error_event)


class LlmflowChunkFormat(ChunkFormat):
    """`WireFormat` of an llmflow model's chunks at /invocations. With tools, the final item is
    the dict `predict_stream` ends with (it carries `tool_calls`)."""

    def __init__(self, with_timings: bool = False):
        self.with_timings = with_timings

    @staticmethod
    def final_of(item: Chunk | dict[str, Any]) -> Chunk | None:  # type: ignore[override]
        if isinstance(item, dict):
            return chunk_from_dict({**item, "finish_reason": "stop"})
        return item if item.finish_reason is not None else None

    @staticmethod
    def text_of(item: Chunk | dict[str, Any]) -> str:  # type: ignore[override]
        return item.text if isinstance(item, Chunk) else ""

    @staticmethod
    def item(chunk: Chunk) -> bytes:
        """The per-token path: `{"content": text}`."""
        return b'data: {"content":' + json.dumps(chunk.text, ensure_ascii=False).encode() + b"}\n\n"

    def final(self, chunk: Chunk | dict[str, Any], final: Chunk, timings: RequestTimings) -> bytes:
        body = dict(chunk) if isinstance(chunk, dict) else chunk_to_dict(final)
        if self.with_timings:
            body["timings"] = timings.to_dict()
        return event(mlflow_scoring.chunk_json(body))

    error = staticmethod(stream_error_event)
