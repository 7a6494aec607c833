"""The Responses API's wire objects for one answer, built from llmflow's chunks.

One builder serves every place that speaks the Responses format: OpenAI's `POST /v1/responses`,
and an MLflow `ResponsesAgent` (in process, and served at `/invocations` and `/responses`), so
their events are the same. A stream is the sequence OpenAI sends:

    response.created, response.in_progress, response.output_item.added,
    response.content_part.added, response.output_text.delta ..., response.output_text.done,
    response.content_part.done, response.output_item.done, response.completed

The answer is one assistant `message` item. A stream that ended at `max_output_tokens` (finish
reason `length`) ends with `response.incomplete` and `incomplete_details.reason =
"max_output_tokens"`, as OpenAI's does. Tool calls (`function_call` items) are not produced
here yet: an answer with them would add items after the message item (`output_index` 1...).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from llmflow.types import Chunk, FinishReason, Usage

#: the request fields a response object echoes back
ECHOED = ("instructions", "max_output_tokens", "temperature", "top_p")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_of(usage: Usage) -> dict[str, Any]:
    """Token usage as the Responses API counts it."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def status_of(reason: FinishReason) -> tuple[str, dict[str, str] | None]:
    """A finish reason as the response's `status` and `incomplete_details`."""
    if reason is FinishReason.STOP:
        return "completed", None
    if reason is FinishReason.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    return "incomplete", None


class ResponseEvents:
    """The events (dicts) and the whole response object of one answer. Stateful: it numbers the
    events (`sequence_number`) and keeps the text for the closing events."""

    def __init__(self, model: str, echo: Mapping[str, Any] | None = None):
        self.response_id = new_id("resp")
        self.item_id = new_id("msg")
        self.created_at = int(time.time())
        self.model = model
        self.echo = {name: (echo or {}).get(name) for name in ECHOED}
        self._sequence = 0
        self._parts: list[str] = []
        self._delta_head = {
            "type": "response.output_text.delta",
            "item_id": self.item_id,
            "output_index": 0,
            "content_index": 0,
            "logprobs": [],
        }
        self._delta_prefix = json.dumps(self._delta_head)[:-1]

    # -- a stream ----------------------------------------------------------------------------------
    def opening(self) -> list[dict[str, Any]]:
        """Everything before the first text delta."""
        return [
            self._event("response.created", response=self.response("in_progress")),
            self._event("response.in_progress", response=self.response("in_progress")),
            self._event("response.output_item.added", output_index=0, item=self._message("in_progress", [])),
            self._event("response.content_part.added", **self._part_position(), part=self._text_part("")),
        ]

    def delta(self, text: str) -> dict[str, Any]:
        """A text delta event (the per-token path in process)."""
        return {**self._delta_head, "sequence_number": self._next_delta(text), "delta": text}

    def delta_json(self, text: str) -> str:
        """The same event as JSON (the per-token path of the server): one `json.dumps`."""
        sequence = self._next_delta(text)
        delta = json.dumps(text, ensure_ascii=False)
        return f'{self._delta_prefix}, "sequence_number": {sequence}, "delta": {delta}}}'

    def _next_delta(self, text: str) -> int:
        self._parts.append(text)
        self._sequence += 1
        return self._sequence - 1

    def closing(self, final: Chunk) -> list[dict[str, Any]]:
        """Everything after the last text delta, ending with `response.completed` (or
        `response.incomplete`) that carries the whole response and its usage."""
        assert final.finish_reason is not None and final.usage is not None
        text = "".join(self._parts)
        status, _ = status_of(final.finish_reason)
        item = self._message(status, [self._text_part(text)])
        response = self.response(status, final.finish_reason, final.usage, [item])
        closing_type = "response.completed" if status == "completed" else "response.incomplete"
        return [
            self._event("response.output_text.done", **self._part_position(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._part_position(), part=self._text_part(text)),
            self._event("response.output_item.done", output_index=0, item=item),
            self._event(closing_type, response=response),
        ]

    def error(self, message: str, code: str | None, param: str | None = None) -> dict[str, Any]:
        """An error after streaming began (the stream ends after it)."""
        return self._event("error", code=code, message=message, param=param)

    # -- objects ----------------------------------------------------------------------------------
    def answer(self, text: str, reason: FinishReason, usage: Usage) -> dict[str, Any]:
        """The whole response object of an answer that was not streamed."""
        status, _ = status_of(reason)
        return self.response(status, reason, usage, [self._message(status, [self._text_part(text)])])

    def response(
        self,
        status: str,
        reason: FinishReason | None = None,
        usage: Usage | None = None,
        output: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        incomplete = status_of(reason)[1] if reason is not None else None
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output or [],
            "parallel_tool_calls": False,
            "previous_response_id": None,
            "store": False,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "truncation": "disabled",
            "usage": usage_of(usage) if usage is not None else None,
            "metadata": {},
            **self.echo,
        }

    def _message(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    @staticmethod
    def _text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _part_position(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
