"""A line-at-a-time Server-Sent Events parser (the WHATWG event-stream format), strict enough
to tell a broken stream from a working one.

Comments (`: ping`) are keep-alives and produce nothing. A line with a field name other than
data/event/id/retry means the body is not SSE at all (an HTML page, NDJSON), which the spec
would silently ignore but a benchmark must report.
"""

from __future__ import annotations

from dataclasses import dataclass

KNOWN_FIELDS = frozenset({"data", "event", "id", "retry"})


class MalformedSSE(Exception):
    """The body is not a valid event stream, or an event's data is not what the API sends."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str
    #: when the event's first line arrived (perf_counter)
    received_at: float


class SSEParser:
    """Feed lines without their line ending; a complete event comes back at its blank line."""

    __slots__ = ("_data", "_event", "_first_at", "_line_no")

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        self._first_at: float | None = None
        self._line_no = 0

    def feed(self, line: str, now: float) -> SSEEvent | None:
        self._line_no += 1
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name not in KNOWN_FIELDS:
            raise MalformedSSE(f"line {self._line_no} is not an SSE field: {clip(line)}")
        if self._first_at is None:
            self._first_at = now
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def close(self) -> SSEEvent | None:
        """The stream ended: an event not terminated by a blank line still counts."""
        return self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        data, event, first_at = self._data, self._event, self._first_at
        self._data, self._event, self._first_at = [], "", None
        if not data or first_at is None:
            return None  # per the spec, an event without data is not dispatched
        return SSEEvent("\n".join(data), event or "message", first_at)


def clip(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
