"""The Responses API's wire format (`ResponsesFormat`, a `WireFormat` of llmflow chunks): the
events of `llmflow.responses.events` as SSE, `data: <event json>` each, then `data: [DONE]` (as
MLflow's AgentServer ends its streams; OpenAI's clients stop there too). The same format answers
`POST /v1/responses`, `/responses` and a ResponsesAgent model's `/invocations`. Its items are
llmflow's chunks, and, for an answer that may call functions, the `ToolCallChunk`s of
`llmflow.tools.tool_stream` too."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llmflow.observability import RequestTimings
from llmflow.responses.events import ResponseEvents
from llmflow.server.error_answers import internal_error_body
from llmflow.server.event_stream import event
from llmflow.server.pipeline import ChunkFormat, ToolItems
from llmflow.tools import ToolCallChunk
from llmflow.types import Chunk


def _events(items: list[dict]) -> bytes:
    return b"".join(event(json.dumps(item, ensure_ascii=False)) for item in items)


class ResponsesFormat(ToolItems, ChunkFormat):
    """Opening events, a text delta per chunk (or a call's events per call piece), the closing
    events with usage; `on_end` is handed the final response object (to store it)."""

    def __init__(self, events: ResponseEvents, on_end: Callable[[dict[str, Any]], None] | None = None):
        self.events = events
        self.on_end = on_end

    def opening(self) -> bytes:
        return _events(self.events.opening())

    def item(self, item: Chunk | ToolCallChunk) -> bytes:  # type: ignore[override]
        """The per-token path: a text delta straight to JSON while the message item is open."""
        if isinstance(item, Chunk) and self.events.in_text:
            return b"data: " + self.events.delta_json(item.text).encode() + b"\n\n"
        return _events(self.events.events_of(item))

    def final(self, chunk: Chunk | ToolCallChunk, final: Chunk, timings: RequestTimings) -> bytes:  # type: ignore[override]
        closing = self.events.closing(final)
        if self.on_end is not None:
            self.on_end(closing[-1]["response"])
        return _events(closing)

    def error(self, error: Exception) -> bytes:
        """An `error` event in the Responses shape (code, message, param)."""
        detail = internal_error_body(error)["error"]
        return _events(
            [self.events.error(detail["message"], detail["code"], detail["param"], detail["type"])]
        )
