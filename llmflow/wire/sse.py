"""Server-sent events: one `data:` line per event, the stream's end marker."""

from __future__ import annotations

#: the end of an OpenAI-style stream
DONE = b"data: [DONE]\n\n"


def event(payload_json: str) -> bytes:
    return b"data: " + payload_json.encode() + b"\n\n"
