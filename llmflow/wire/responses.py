"""The Responses API on the wire (`ResponsesEncoder`): the events of `llmflow.responses.events`
as SSE, `data: <event json>` each, then `data: [DONE]` (as MLflow's AgentServer ends its
streams; OpenAI's clients stop there too), and the whole response object. The same encoder
answers `POST /v1/responses`, `/responses` and a ResponsesAgent model's `/invocations`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llmflow.generation import Event, Final, GenerationRecord, Text
from llmflow.responses.events import ResponseEvents
from llmflow.wire.errors import internal_error_body
from llmflow.wire.sse import event as sse_event


def _events(items: list[dict]) -> bytes:
    return b"".join(sse_event(json.dumps(item, ensure_ascii=False)) for item in items)


class ResponsesEncoder:
    """Opening events, a text delta per text event (or a call's events per call piece), the
    closing events with usage; `on_end` is handed the final response object (to store it)."""

    def __init__(self, events: ResponseEvents, on_end: Callable[[dict[str, Any]], None] | None = None):
        self.events = events
        self.on_end = on_end

    def opening(self) -> bytes:
        return _events(self.events.opening())

    def event(self, event: Event) -> bytes:
        """The per-token path: a text delta straight to JSON while the message item is open."""
        kind = type(event)
        if kind is Text and self.events.in_text:
            return b"data: " + self.events.delta_json(event.text).encode() + b"\n\n"  # type: ignore[union-attr]
        if kind is Final:
            closing = self.events.closing(event.record)  # type: ignore[union-attr]
            self._ended(closing[-1]["response"])
            return _events(closing)
        return _events(self.events.events_of(event))

    def whole(self, record: GenerationRecord) -> dict[str, Any]:
        response = self.events.answer(record)
        self._ended(response)
        return response

    def _ended(self, response: dict[str, Any]) -> None:
        if self.on_end is not None:
            self.on_end(response)

    def error(self, error: BaseException) -> bytes:
        """An `error` event in the Responses shape (code, message, param)."""
        detail = internal_error_body(error)["error"]
        return _events(
            [self.events.error(detail["message"], detail["code"], detail["param"], detail["type"])]
        )
