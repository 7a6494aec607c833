"""The Responses API's wire objects for one answer, built from a generation's events.

One builder serves every place that speaks the Responses format: OpenAI's `POST /v1/responses`,
and an MLflow `ResponsesAgent` (in process, and served at `/invocations` and `/responses`), so
their events are the same. A stream is the sequence OpenAI sends:

    response.created, response.in_progress, response.output_item.added,
    response.content_part.added, response.output_text.delta ..., response.output_text.done,
    response.content_part.done, response.output_item.done, response.completed

A text answer is one assistant `message` item. An answer that may call functions (`calls=True`)
opens its items as they come: a `message` item at its first text, then one `function_call` item
per call, streamed as OpenAI streams them (`response.output_item.added` with the item,
`response.function_call_arguments.delta` ..., `response.function_call_arguments.done`,
`response.output_item.done`). A stream that ended at `max_output_tokens` (finish reason
`length`) ends with `response.incomplete` and `incomplete_details.reason = "max_output_tokens"`,
as OpenAI's does. A whole answer is built by the same steps, so it equals the stream's last event.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmflow.generation import CallDelta, Event, GenerationRecord, Text
from llmflow.types import FinishReason, Usage

#: the request fields a response object echoes back, and what it says when a request has none
#: (`temperature` and `top_p`: the values used, which `turn.prepare_response` puts in the echo)
ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "temperature": 1.0,
    "top_p": 1.0,
    "tools": [],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "text": {"format": {"type": "text"}},
    "previous_response_id": None,
    "store": False,
    "metadata": {},
    "max_tool_calls": None,
    "safety_identifier": None,
    "prompt_cache_key": None,
}
#: what a response object says of the features llmflow does not have
FIXED: dict[str, Any] = {
    "truncation": "disabled",
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "reasoning": None,
    "background": False,
    "service_tier": "default",
}
#: the statuses of a response that has ended
ENDED = ("completed", "incomplete", "failed")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_of(usage: Usage) -> dict[str, Any]:
    """Token usage as the Responses API counts it."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def echoed(given: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields a response repeats, in the shape a response object has them: every
    tool with its `description`, `parameters` and `strict`, a JSON schema format with its
    `name`, `description` and `strict`."""
    echo = {name: default if given.get(name) is None else given[name] for name, default in ECHOED.items()}
    echo["tools"] = [_tool(tool) for tool in echo["tools"]]
    fmt = echo["text"].get("format") if isinstance(echo["text"], Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = {"name": "response", "description": None, **fmt, "strict": bool(fmt.get("strict"))}
        echo["text"] = {**echo["text"], "format": schema}
    return echo


def _tool(tool: Any) -> Any:
    if not isinstance(tool, Mapping):
        return tool
    return {"description": None, "parameters": None, "strict": None, **tool}


def status_of(reason: FinishReason) -> tuple[str, dict[str, str] | None]:
    """A finish reason as the response's `status` and `incomplete_details`."""
    if reason is FinishReason.STOP:
        return "completed", None
    if reason is FinishReason.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    return "incomplete", None


@dataclass
class _Call:
    """A `function_call` output item as it streams."""

    output_index: int
    call_id: str
    name: str
    item_id: str = field(default_factory=lambda: new_id("fc"))
    arguments: list[str] = field(default_factory=list)

    def item(self, done: bool) -> dict[str, Any]:
        arguments = "".join(self.arguments)
        return {
            "id": self.item_id,
            "type": "function_call",
            "status": _call_status(arguments) if done else "in_progress",
            "arguments": arguments if done else "",
            "call_id": self.call_id,
            "name": self.name,
        }


def error_payload(message: str, code: str | None, param: str | None, type_: str) -> dict[str, Any]:
    """An `error` event's `error` object, as the Open Responses spec has it."""
    return {"type": type_, "code": code, "message": message, "param": param}


def _call_status(arguments: str) -> str:
    """A call cut before its arguments closed (at `max_output_tokens`) is incomplete."""
    try:
        json.loads(arguments)
    except ValueError:
        return "incomplete"
    return "completed"


class ResponseEvents:
    """The events (dicts) and the whole response object of one answer. Stateful: it numbers the
    events (`sequence_number`), keeps each output item's text for the closing events, and knows
    which item is open. `calls`: the answer may hold function calls (its pieces are text and
    call pieces), so its message item opens only if text comes."""

    def __init__(self, model: str, echo: Mapping[str, Any] | None = None, *, calls: bool = False):
        self.response_id = new_id("resp")
        self.item_id = new_id("msg")
        self.created_at = int(time.time())
        self.model = model
        self.echo = echoed(echo or {})
        self.calls = calls
        self._sequence = 0
        self._parts: list[str] = []
        #: output items in order: "message" (this answer's one message item) or a call
        self._items: list[str | _Call] = []
        self._calls: dict[int, _Call] = {}
        self._open: str | _Call | None = None
        self._message_status = "completed"
        self._delta_head: dict[str, Any] = {}
        self._delta_prefix = ""
        self._point_deltas(0)

    def _point_deltas(self, output_index: int) -> None:
        self._delta_head = {
            "type": "response.output_text.delta",
            "item_id": self.item_id,
            "output_index": output_index,
            "content_index": 0,
            "logprobs": [],
        }
        self._delta_prefix = json.dumps(self._delta_head)[:-1]

    # -- a stream ----------------------------------------------------------------------------------
    def opening(self) -> list[dict[str, Any]]:
        """Everything before the first piece of the answer: with `calls`, the response only;
        else also the message item, whose text deltas follow."""
        events = [
            self._event("response.created", response=self.response("in_progress")),
            self._event("response.in_progress", response=self.response("in_progress")),
        ]
        return events if self.calls else events + self._open_message()

    @property
    def in_text(self) -> bool:
        """The message item is open: text goes out as plain deltas (`delta`, `delta_json`)."""
        return self._open == "message"

    def delta(self, text: str) -> dict[str, Any]:
        """A text delta event (the per-token path in process), the message item being open."""
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

    def events_of(self, event: Event) -> list[dict[str, Any]]:
        """The events of a generation's event before its end: text, or a piece of a call."""
        kind = type(event)
        if kind is CallDelta:
            return self.piece(event)  # type: ignore[arg-type]
        if kind is not Text:
            return []  # a choice's end: the closing events say it
        if self.in_text:
            return [self.delta(event.text)]  # type: ignore[union-attr]
        return self.piece(event.text) if event.text else []  # type: ignore[union-attr]

    def piece(self, piece: str | CallDelta) -> list[dict[str, Any]]:
        """The events of one piece of an answer with `calls`: text (the message item opens at
        the first), or a piece of a call (its item opens at its first piece, closing the item
        before it)."""
        if isinstance(piece, str):
            if self.in_text:
                return [self.delta(piece)]
            if "message" in self._items:  # (the splitter never writes text after a call)
                return []
            return [*self._close_open(), *self._open_message(), self.delta(piece)]
        call = self._calls.get(piece.index)
        events: list[dict[str, Any]] = []
        if call is None:
            events = self._close_open() + self._open_call(piece)
            call = self._calls[piece.index]
        if piece.arguments:
            call.arguments.append(piece.arguments)
            events.append(
                self._event("response.function_call_arguments.delta", **self._at(call), delta=piece.arguments)
            )
        return events

    def closing(self, record: GenerationRecord) -> list[dict[str, Any]]:
        """Everything after the answer's last piece: the open item's closing events, then
        `response.completed` (or `response.incomplete`) that carries the whole response and
        its usage. An answer with `calls` that wrote nothing still has its (empty) message."""
        reason, usage = record.choices[0].finish_reason, record.usage
        assert reason is not None and usage is not None
        status, _ = status_of(reason)
        events = self._open_message() if not self._items else []
        events += self._close_open(status)
        response = self.response(status, reason, usage, self._output())
        closing_type = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(closing_type, response=response)]

    def error(
        self, message: str, code: str | None, param: str | None = None, type_: str = "server_error"
    ) -> dict[str, Any]:
        """An error after streaming began (the stream ends after it): `code`, `message` and `param`
        as OpenAI's clients read them, and the same in `error` as the Open Responses spec has it."""
        return self._event(
            "error", code=code, message=message, param=param, error=error_payload(message, code, param, type_)
        )

    # -- output items -------------------------------------------------------------------------------
    def _open_message(self) -> list[dict[str, Any]]:
        self._point_deltas(len(self._items))
        self._items.append("message")
        self._open = "message"
        return [
            self._event(
                "response.output_item.added",
                output_index=self._delta_head["output_index"],
                item=self._message("in_progress", []),
            ),
            self._event("response.content_part.added", **self._part_position(), part=self._text_part("")),
        ]

    def _open_call(self, piece: CallDelta) -> list[dict[str, Any]]:
        call = _Call(len(self._items), piece.id or new_id("call"), piece.name or "")
        self._items.append(call)
        self._calls[piece.index] = call
        self._open = call
        return [
            self._event("response.output_item.added", output_index=call.output_index, item=call.item(False))
        ]

    def _close_open(self, status: str = "completed") -> list[dict[str, Any]]:
        """The closing events of the open item (none if none is open)."""
        item, self._open = self._open, None
        if item is None:
            return []
        if isinstance(item, _Call):
            done = item.item(True)
            return [
                self._event(
                    "response.function_call_arguments.done",
                    **self._at(item),
                    name=item.name,
                    arguments=done["arguments"],
                ),
                self._event("response.output_item.done", output_index=item.output_index, item=done),
            ]
        text = "".join(self._parts)
        self._message_status = status
        return [
            self._event("response.output_text.done", **self._part_position(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._part_position(), part=self._text_part(text)),
            self._event(
                "response.output_item.done",
                output_index=self._delta_head["output_index"],
                item=self._message(status, [self._text_part(text)]),
            ),
        ]

    def _output(self) -> list[dict[str, Any]]:
        text = "".join(self._parts)
        return [
            item.item(True)
            if isinstance(item, _Call)
            else self._message(self._message_status, [self._text_part(text)])
            for item in self._items
        ]

    @staticmethod
    def _at(call: _Call) -> dict[str, Any]:
        return {"item_id": call.item_id, "output_index": call.output_index}

    # -- objects ----------------------------------------------------------------------------------
    def answer(self, record: GenerationRecord) -> dict[str, Any]:
        """The whole response object of an answer that was not streamed, through the same
        steps as a stream: its text, then (with `calls`) every call it opened."""
        self.opening()
        choice = record.choices[0]
        text = choice.answer_text if self.calls else choice.text
        if self.calls:
            if text:
                self.piece(text)
            for index, call in enumerate(choice.all_calls):
                self.piece(CallDelta(index, call.id, call.name, call.arguments))
        else:
            self.delta(text)
        return self.closing(record)[-1]["response"]

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
            "completed_at": int(time.time()) if status in ENDED else None,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output or [],
            "usage": usage_of(usage) if usage is not None else None,
            **FIXED,
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
        return {"item_id": self.item_id, "output_index": self._delta_head["output_index"], "content_index": 0}

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
