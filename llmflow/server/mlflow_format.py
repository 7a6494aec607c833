"""MLflow's streaming wire format at /invocations: one `data: <chunk json>` event per
`predict_stream` chunk, then `data: [DONE]` (the format Databricks Model Serving uses).

Chunks are whatever the model yields: llmflow's `{"content"}` dicts ending with
`{"content": "", "finish_reason", "usage"}`, other models' dicts or strings. When an llmflow
model was asked for `timings`, the final chunk's `timings` are the server's (queue included),
the same numbers as /metrics.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mlflow.exceptions import MlflowException

from llmflow.errors import LlmflowError
from llmflow.observability import RequestTimings
from llmflow.server import mlflow_scoring
from llmflow.server.error_answers import error_body, llmflow_error_body
from llmflow.server.event_stream import event
from llmflow.types import Chunk, FinishReason, Usage

logger = logging.getLogger(__name__)


class ChunkDictFormat:
    """`WireFormat` of a pyfunc model's `predict_stream` chunks."""

    @staticmethod
    def opening() -> bytes:
        return b""

    @staticmethod
    def final_of(chunk: Any) -> Chunk | None:
        """llmflow models end their stream with `{"finish_reason", "usage"}`; other models may not."""
        if not isinstance(chunk, dict):
            return None
        reason = chunk.get("finish_reason")
        if not isinstance(reason, str) or not reason:
            return None
        try:
            finish = FinishReason(reason)
        except ValueError:
            finish = None  # another model's reason: still the end, without one of llmflow's reasons
        return Chunk("", finish, _usage_of(chunk.get("usage")))

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

    @staticmethod
    def final(chunk: Any, final: Chunk, timings: RequestTimings) -> bytes:
        if "timings" in chunk:
            chunk = {**chunk, "timings": timings.to_dict()}
        return event(mlflow_scoring.chunk_json(chunk))

    @staticmethod
    def error(error: Exception) -> bytes:
        """In OpenAI's shape, as every error event of the server."""
        return event(json.dumps(_stream_error_body(error), ensure_ascii=False))


def _usage_of(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return Usage(prompt, completion)
    return None


def _stream_error_body(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, LlmflowError):
        return llmflow_error_body(exc)
    if isinstance(exc, MlflowException):
        return error_body(exc.message, "invalid_request_error", str(exc.error_code))
    return error_body(
        f"the model failed while streaming: {type(exc).__name__}: {exc}", "server_error", "model_error"
    )
