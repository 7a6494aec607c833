"""What one SSE event of an OpenAI-compatible stream says: text, finish reason, usage, or an
error. Tolerant of what real servers send (empty deltas, `choices: []` usage chunks, null
fields, reasoning text), strict about what is not a chunk at all."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmflow.bench.sse import MalformedSSE, SSEEvent, clip

DONE = "[DONE]"


class StreamErrorEvent(Exception):
    """The server reported an error inside the stream (after the 200 and the headers)."""


@dataclass(frozen=True, slots=True)
class StreamDelta:
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def parse_event(event: SSEEvent) -> StreamDelta | None:
    """The delta an event carries; None for `[DONE]`. Raises `StreamErrorEvent` for an error
    event and `MalformedSSE` for data that is not a chunk object."""
    if event.data.strip() == DONE:
        return None
    try:
        body = json.loads(event.data)
    except json.JSONDecodeError as exc:
        raise MalformedSSE(f"an event's data is not JSON ({exc.msg}): {clip(event.data)}") from None
    if not isinstance(body, dict):
        raise MalformedSSE(f"an event's data is not a JSON object: {clip(event.data)}")
    if event.event == "error" or body.get("error") is not None:
        raise StreamErrorEvent(error_message(body))
    return _delta(body)


def error_message(body: Any) -> str:
    """The message of an OpenAI-shaped error body (or TGI's `{"error": "..."}`)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or json.dumps(error)[:300]
            code = error.get("code") or error.get("type")
            return f"{message} ({code})" if code else str(message)
        if error is not None:
            return str(error)
        if "detail" in body:  # FastAPI's validation errors
            return str(body["detail"])[:300]
    return str(body)[:300]


def _delta(body: dict[str, Any]) -> StreamDelta:
    choices = body.get("choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        raise MalformedSSE(f"`choices` is not a list: {clip(json.dumps(body))}")
    text, finish = "", None
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise MalformedSSE(f"a choice is not an object: {clip(json.dumps(body))}")
        text = _choice_text(choice)
        finish = choice.get("finish_reason") or None
    prompt_tokens = completion_tokens = None
    usage = body.get("usage")
    if isinstance(usage, dict):
        prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        completion_tokens = _int_or_none(usage.get("completion_tokens"))
    if not choices and not isinstance(usage, dict) and "id" not in body and "object" not in body:
        raise MalformedSSE(f"an event is neither a chunk nor usage: {clip(json.dumps(body))}")
    return StreamDelta(text, finish, prompt_tokens, completion_tokens)


def _choice_text(choice: dict[str, Any]) -> str:
    """Chat chunks carry `delta.content` (and reasoning models `delta.reasoning_content`);
    completion chunks carry `text`."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        parts = [delta.get("reasoning_content"), delta.get("reasoning"), delta.get("content")]
        return "".join(p for p in parts if isinstance(p, str))
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
