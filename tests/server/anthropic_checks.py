"""Reading Anthropic's wire format in tests: SSE frames as (event, payload) pairs, each payload
checked against the `anthropic` SDK's own pydantic types with no field the types do not know."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic.types as types
from anthropic import BaseModel
from pydantic import TypeAdapter

#: the event names of a stream in Anthropic's order: blocks of start, deltas, stop; pings anywhere
EVENT_ORDER = re.compile(
    r"message_start (content_block_start (content_block_delta )*content_block_stop )*"
    r"message_delta message_stop "
)
STREAM_EVENT = TypeAdapter(types.RawMessageStreamEvent)
ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "timeout_error",
    "api_error",
    "overloaded_error",
)


def frames(raw: str) -> list[tuple[str, dict[str, Any]]]:
    """`event: NAME` / `data: {json}` pairs of an SSE body, checking the framing on the way."""
    assert raw.endswith("\n\n"), raw[-100:]
    out = []
    for block in raw.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, payload = lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))
        assert payload["type"] == name, block
        out.append((name, payload))
    return out


def no_unknown_fields(model: Any) -> None:
    """Every field of `model` (and of the models inside it) is one its SDK type declares."""
    if isinstance(model, BaseModel):
        assert not model.model_extra, f"{type(model).__name__} has unknown fields {model.model_extra}"
        for name in type(model).model_fields:
            no_unknown_fields(getattr(model, name))
    elif isinstance(model, list):
        for item in model:
            no_unknown_fields(item)


def checked_event(name: str, payload: dict[str, Any]) -> Any:
    """A stream event as the SDK's type (pings and errors have none in the union)."""
    if name == "ping":
        assert payload == {"type": "ping"}
        return payload
    if name == "error":
        return checked_error(payload)
    event = STREAM_EVENT.validate_python(payload)
    no_unknown_fields(event)
    return event


def checked_message(payload: dict[str, Any]) -> types.Message:
    message = types.Message.model_validate(payload)
    no_unknown_fields(message)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.stop_reason is not None
    for block in message.content:
        if block.type == "tool_use":
            assert block.id.startswith("toolu_") and isinstance(block.input, dict)
    return message


def checked_error(payload: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`; of `kind` when given."""
    assert payload["type"] == "error" and set(payload) == {"type", "error"}, payload
    error = payload["error"]
    assert set(error) == {"type", "message"} and error["type"] in ERROR_TYPES, payload
    if error["type"] != "request_too_large":  # Anthropic's documented type; not in the SDK's union
        no_unknown_fields(types.ErrorResponse.model_validate(payload))
    if kind is not None:
        assert error["type"] == kind, payload
    return error


def event_order(names: list[str]) -> str:
    """The names without pings, for `EVENT_ORDER`; the second event is a ping."""
    assert names[1] == "ping", names
    return "".join(f"{name} " for name in names if name != "ping")


def check_stream(pairs: list[tuple[str, dict[str, Any]]]) -> types.Message:
    """A whole stream in order, every event of the SDK's types, block indexes counting up; the
    message it adds up to (through the SDK's own accumulator)."""
    from anthropic.lib.streaming._messages import accumulate_event

    names = [name for name, _ in pairs]
    assert EVENT_ORDER.fullmatch(event_order(names)), names
    snapshot = None
    index = -1
    partial_json: dict[int, bytes] = {}
    for name, payload in pairs:
        event = checked_event(name, payload)
        if name == "ping":
            continue
        if name == "content_block_start":
            index += 1
        if name.startswith("content_block"):
            assert event.index == index, (index, payload)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=partial_json)
    assert snapshot is not None
    return snapshot
