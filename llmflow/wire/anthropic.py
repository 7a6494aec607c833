"""Anthropic's Messages on the wire (`MessagesEncoder`): a generation's events as a stream's
events, its record as the whole answer's Message object.

A stream is `event: NAME` / `data: {json}` pairs: `message_start` (the message, its content
empty) and a `ping`; then per content block `content_block_start`, its deltas (`thinking_delta`
for a reasoning model's thinking, `text_delta`, `input_json_delta` for a call's input) and
`content_block_stop`; then `message_delta` (stop reason, stop sequence, usage) and
`message_stop`. No `[DONE]`. A block opens as its first piece comes, so text, thinking and
calls each get blocks of their own in the order the model wrote them.

Usage is Anthropic's: `input_tokens` counts the prompt tokens that were computed, apart from
those read from a cache (`cache_read_input_tokens`); the three add up to the prompt.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from llmflow.generation import CallDelta, ChoiceRecord, Event, Final, GenerationRecord, Reasoning, Text
from llmflow.types import FinishReason, ToolCall, Usage
from llmflow.wire.errors import anthropic_sse_error

#: what an idle stream sends, and the second event of every stream
PING_EVENT = b'event: ping\ndata: {"type":"ping"}\n\n'
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
#: the placeholder a delta event is split around, so that a delta costs one `json.dumps`
_PIECE = "\x00piece\x00"
#: block type -> (the block as `content_block_start` opens it, its delta type, the delta's key)
_BLOCKS: dict[str, tuple[dict[str, Any], str, str]] = {
    "text": ({"type": "text", "text": ""}, "text_delta", "text"),
    "thinking": ({"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", "thinking"),
    "tool_use": ({"type": "tool_use", "input": {}}, "input_json_delta", "partial_json"),
}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(payload).encode() + b"\n\n"


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id(call_id: str) -> str:
    """A call's id as Anthropic spells them (`toolu_...`), the same for its stream and its answer."""
    return "toolu_" + call_id.removeprefix("call_")


def stop_reason(finish: FinishReason, stop_sequence: str | None, called: bool) -> str:
    """Anthropic's stop reason: `stop_sequence` when the answer ended on one the request gave,
    `tool_use` when it ended after calling tools, `max_tokens` when it was cut, else `end_turn`."""
    if finish is FinishReason.LENGTH:
        return "max_tokens"
    if stop_sequence is not None:
        return "stop_sequence"
    return "tool_use" if called else "end_turn"


def usage_of(usage: Usage) -> dict[str, int]:
    cached = usage.cached_tokens
    return {
        "input_tokens": usage.prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": usage.completion_tokens,
    }


class MessagesEncoder:
    """One answer's events, streamed, or its Message object, whole. `stop_sequences`: the
    request's own (a stop string of the model's defaults ends the turn as `end_turn`)."""

    def __init__(self, model: str, input_tokens: int, stop_sequences: Sequence[str] = ()):
        self.id = new_message_id()
        self.model = model
        self._input_tokens = input_tokens
        self._stop_sequences = frozenset(stop_sequences)
        #: the open block's type and index (-1: none opened yet), and its delta split around a piece
        self._open: str | None = None
        self._index = -1
        self._prefix = self._suffix = b""

    # -- a stream ---------------------------------------------------------------------------------
    def opening(self) -> bytes:
        usage = {
            "input_tokens": self._input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        }
        message = self._message([], None, None, usage)
        return event("message_start", {"type": "message_start", "message": message}) + PING_EVENT

    def event(self, item: Event) -> bytes:
        """The per-token path: a delta of the open block (a block opened first when the piece
        is of another kind, or starts a call)."""
        kind = type(item)
        if kind is Text:
            return self._open_block("text") + self._delta(item.text)  # type: ignore[union-attr]
        if kind is Reasoning:
            return self._open_block("thinking") + self._delta(item.text)  # type: ignore[union-attr]
        if kind is CallDelta:
            opened = self._open_call(item) if item.id is not None else b""  # type: ignore[union-attr,arg-type]
            return opened + (self._delta(item.arguments) if item.arguments else b"")  # type: ignore[union-attr]
        if kind is Final:
            return self._end(item.record)  # type: ignore[union-attr]
        return b""  # a choice's end: the final event says it

    def _end(self, record: GenerationRecord) -> bytes:
        """The open block's end, `message_delta` and `message_stop`."""
        choice = record.choices[0]
        assert record.usage is not None
        sequence = self._stop_sequence(choice.stop_sequence)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason_of(choice, sequence), "stop_sequence": sequence},
            "usage": usage_of(record.usage),
        }
        return self._close_block() + event("message_delta", delta) + MESSAGE_STOP

    @staticmethod
    def error(error: BaseException) -> bytes:
        return anthropic_sse_error(error)

    # -- the whole answer ---------------------------------------------------------------------------
    def whole(self, record: GenerationRecord) -> dict[str, Any]:
        """The Message object of a whole answer: its thinking, text and calls, in that order."""
        choice = record.choices[0]
        assert record.usage is not None
        content: list[dict[str, Any]] = []
        if choice.reasoning:
            content.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
        text = choice.text
        if text:
            content.append({"type": "text", "text": text})
        content.extend(_tool_use(call) for call in choice.calls)
        sequence = self._stop_sequence(choice.stop_sequence)
        return self._message(content, _stop_reason_of(choice, sequence), sequence, usage_of(record.usage))

    # -- blocks -----------------------------------------------------------------------------------------
    def _message(
        self, content: list[dict[str, Any]], reason: str | None, sequence: str | None, usage: dict[str, int]
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage,
        }

    def _stop_sequence(self, matched: str | None) -> str | None:
        return matched if matched in self._stop_sequences else None

    def _open_call(self, item: CallDelta) -> bytes:
        assert item.id is not None
        return self._open_block("tool_use", {"id": tool_use_id(item.id), "name": item.name}, new=True)

    def _open_block(self, kind: str, fields: dict[str, Any] | None = None, *, new: bool = False) -> bytes:
        """The events that end the open block and start one of `kind` (nothing when one of
        that kind is open and `new` is false)."""
        if self._open == kind and not new:
            return b""
        closed = self._close_block()
        self._open, self._index = kind, self._index + 1
        start, delta_type, key = _BLOCKS[kind]
        block = {"type": start["type"], **(fields or {}), **{k: v for k, v in start.items() if k != "type"}}
        placeholder = event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._index, "delta": {"type": delta_type, key: _PIECE}},
        )
        self._prefix, _, self._suffix = placeholder.rpartition(_dumps(_PIECE).encode())
        started = {"type": "content_block_start", "index": self._index, "content_block": block}
        return closed + event("content_block_start", started)

    def _delta(self, piece: str) -> bytes:
        return self._prefix + json.dumps(piece, ensure_ascii=False).encode() + self._suffix

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self._index})


def _stop_reason_of(choice: ChoiceRecord, sequence: str | None) -> str:
    assert choice.finish_reason is not None
    return stop_reason(choice.finish_reason, sequence, bool(choice.calls))


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    return {
        "type": "tool_use",
        "id": tool_use_id(call.id),
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {},
    }
