"""A Responses request's `input` as the items the API lists back (`GET /v1/responses/{id}/input_items`)
and a later turn continues from (`previous_response_id`): each item with an `id` and a `status`,
a message's content as a list of parts. Read after `request.read_input` has accepted the input,
so every item here is one it reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmflow.responses.events import new_id

#: item type -> the prefix of the ids given to items without one
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_items(value: str | list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The items of an accepted `input`: a string is one user message."""
    if isinstance(value, str):
        return [_message({"role": "user", "content": value})]
    return [_item(item) for item in value]


def _item(item: Mapping[str, Any]) -> dict[str, Any]:
    kind = item.get("type") or "message"
    if kind == "message":
        return _message(item)
    out = {key: value for key, value in item.items() if value is not None}
    out.setdefault("id", new_id(_ID_PREFIXES.get(kind, "item")))
    out.setdefault("status", "completed")
    return out


def _message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = item["role"]
    return {
        "id": item.get("id") or new_id("msg"),
        "type": "message",
        "role": role,
        "status": item.get("status") or "completed",
        "content": _parts(item["content"], "output_text" if role == "assistant" else "input_text"),
    }


def _parts(content: str | list[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    parts = [{"type": kind, "text": content}] if isinstance(content, str) else [dict(p) for p in content]
    for part in parts:
        if part["type"] == "text":  # (a part type request.py reads, not one the API lists)
            part["type"] = kind
        if part["type"] == "output_text":
            part.setdefault("annotations", [])
    return parts
