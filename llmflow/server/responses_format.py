"""The Responses API's wire format (`ResponsesFormat`, a `WireFormat` of llmflow chunks): the
events of `llmflow.responses.events` as SSE, `data: <event json>` each, then `data: [DONE]` (as
MLflow's AgentServer ends its streams; OpenAI's clients stop there too). The same format answers
`POST /v1/responses`, `/responses` and a ResponsesAgent model's `/invocations`."""

from __future__ import annotations

import json

from llmflow.observability import RequestTimings
from llmflow.responses.events import ResponseEvents
from llmflow.server.error_answers import internal_error_body
from llmflow.server.event_stream import event
from llmflow.server.pipeline import ChunkFormat
from llmflow.types import Chunk


def _events(items: list[dict]) -> bytes:
    return b"".join(event(json.dumps(item, ensure_ascii=False)) for item in items)


class ResponsesFormat(ChunkFormat):
    """Opening events, a text delta per chunk, the closing events with usage."""

    def __init__(self, events: ResponseEvents):
        self.events = events

    def opening(self) -> bytes:
        return _events(self.events.opening())

    def item(self, chunk: Chunk) -> bytes:
        """The per-token path."""
        return b"data: " + self.events.delta_json(chunk.text).encode() + b"\n\n"

    def final(self, chunk: Chunk, final: Chunk, timings: RequestTimings) -> bytes:
        return _events(self.events.closing(final))

    def error(self, error: Exception) -> bytes:
        """An `error` event in the Responses shape (code, message, param)."""
        detail = internal_error_body(error)["error"]
        return _events([self.events.error(detail["message"], detail["code"], detail["param"])])
