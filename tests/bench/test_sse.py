"""The SSE parser, table-driven: keep-alives, multi-line data, event types, broken bodies."""

from __future__ import annotations

import pytest

from llmflow.bench.sse import MalformedSSE, SSEParser


def events(lines: list[str]) -> list[tuple[str, str, float]]:
    parser = SSEParser()
    out = []
    for now, line in enumerate(lines):
        event = parser.feed(line, float(now))
        if event is not None:
            out.append((event.event, event.data, event.received_at))
    last = parser.close()
    if last is not None:
        out.append((last.event, last.data, last.received_at))
    return out


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["data: {}", ""], [("message", "{}", 0.0)]),
        (["data:{}", ""], [("message", "{}", 0.0)]),  # the space after the colon is optional
        (["data:  x", ""], [("message", " x", 0.0)]),  # only one space is stripped
        ([": ping", "", "data: a", ""], [("message", "a", 2.0)]),  # comments are keep-alives
        (["data: a", "data: b", ""], [("message", "a\nb", 0.0)]),  # multi-line data
        (["event: error", "data: {}", ""], [("error", "{}", 0.0)]),
        (["id: 7", "retry: 10", "data: a", ""], [("message", "a", 0.0)]),
        (["event: ping", ""], []),  # no data: nothing is dispatched
        (["", "", "data: a", "", ""], [("message", "a", 2.0)]),
        (["data: a"], [("message", "a", 0.0)]),  # the stream ended without a blank line
        (["data: a", "", "data: b", ""], [("message", "a", 0.0), ("message", "b", 2.0)]),
        (["data", ""], [("message", "", 0.0)]),  # a field name alone has an empty value
    ],
)
def test_events(lines, expected):
    assert events(lines) == expected


@pytest.mark.parametrize(
    "line", ['{"id": 1, "choices": []}', "<html><body>Not Found</body></html>", "hello world", "daTa: x"]
)
def test_a_line_that_is_not_sse_is_malformed(line):
    with pytest.raises(MalformedSSE, match="line 2 is not an SSE field"):
        events(["data: ok", line, ""])
