"""MLflow's chunk dicts: what an llmflow model's `predict_stream` yields, in process and at
/invocations (`data: <chunk json>` events, the format Databricks Model Serving streams).

`{"content": text}` per piece of answer (with `logprobs` when asked for), then exactly one last
chunk `{"content": "", "finish_reason", "usage"}`; an answer that called functions carries
them in that last chunk (`tool_calls`, finish reason `tool_calls`): calls are not content. With
`with_timings`, the last chunk carries the request's `timings`.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.exceptions import MlflowException

from llmflow.errors import LlmflowError
from llmflow.generation import Event, Final, GenerationRecord, Text
from llmflow.wire.errors import error_body, llmflow_error_body
from llmflow.wire.sse import event as sse_event

_TEXT_PREFIX = b'data: {"content":'
_TEXT_SUFFIX = b"}\n\n"


class MlflowChunksEncoder:
    """One stream's chunks: `chunk(event)` for `predict_stream`, `event(event)` for SSE."""

    def __init__(self, with_timings: bool = False):
        self.with_timings = with_timings

    def chunk(self, event: Event) -> dict[str, Any] | None:
        """The chunk dict of `event`, None for an event that is no chunk (thinking, call pieces,
        a choice's end: the last chunk says all of it)."""
        kind = type(event)
        if kind is Text:
            if event.logprobs:  # type: ignore[union-attr]
                return {"content": event.text, "logprobs": [t.to_dict() for t in event.logprobs]}  # type: ignore[union-attr]
            return {"content": event.text}  # type: ignore[union-attr]
        if kind is Final:
            return self.last(event.record)  # type: ignore[union-attr]
        return None

    def last(self, record: GenerationRecord) -> dict[str, Any]:
        choice = record.choices[0]
        assert record.usage is not None
        body: dict[str, Any] = {
            "content": "",
            "finish_reason": choice.finish,
            "usage": record.usage.to_dict(),
        }
        if choice.calls:
            body["tool_calls"] = [call.to_openai() for call in choice.calls]
        if self.with_timings:
            body["timings"] = record.timings.to_dict()
        return body

    @staticmethod
    def opening() -> bytes:
        return b""

    @staticmethod
    def error(error: BaseException) -> bytes:
        return stream_error_event(error)

    def event(self, event: Event) -> bytes:
        """The per-token path first: a text chunk's bytes around one `json.dumps`."""
        if type(event) is Text and not event.logprobs:  # type: ignore[union-attr]
            return _TEXT_PREFIX + json.dumps(event.text, ensure_ascii=False).encode() + _TEXT_SUFFIX  # type: ignore[union-attr]
        body = self.chunk(event)
        return b"" if body is None else sse_event(json.dumps(body, ensure_ascii=False, separators=(",", ":")))


def stream_error_event(error: BaseException) -> bytes:
    """After streaming began: an error event in OpenAI's shape, as every error event of the
    server; a model's own refusal (an `MlflowException`) keeps its error code."""
    if isinstance(error, LlmflowError):
        body = llmflow_error_body(error)
    elif isinstance(error, MlflowException):
        body = error_body(error.message, "invalid_request_error", str(error.error_code))
    else:
        message = f"the model failed while streaming: {type(error).__name__}: {error}"
        body = error_body(message, "server_error", "model_error")
    return sse_event(json.dumps(body, ensure_ascii=False))
