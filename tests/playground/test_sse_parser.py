"""The page's SSE parser (`static/sse.js`), run in the browser: however the network splits the
body, the same events come out."""

from __future__ import annotations

import json

import pytest

# CRLF and LF line ends, a ping comment, a two-line data field, an event name, a character of
# three and one of four UTF-8 bytes, a last event without its blank line.
BODY = (
    'data: {"a":1}\n\n'
    ": ping\r\n\r\n"
    "data: こんにちは🍣\r\n\r\n"
    "event: error\ndata: line one\ndata: line two\n\n"
    "data:no space\r\r"
    "data: [DONE]"
)
EXPECTED = [
    ['{"a":1}', ""],
    ["こんにちは🍣", ""],
    ["line one\nline two", "error"],
    ["no space", ""],
    ["[DONE]", ""],
]

PARSE_SPLITS = """async ([body, mode]) => {
    const { SseParser } = await import("./playground/sse.js");
    const bytes = new TextEncoder().encode(body);
    const parse = (pieces) => {
        const events = [];
        const parser = new SseParser((data, name) => events.push([data, name]));
        for (const piece of pieces) parser.push(piece);
        parser.end();
        return events;
    };
    const results = [];
    if (mode === "bytes") {
        results.push(parse([...bytes].map((b) => new Uint8Array([b]))));
    } else {
        for (let cut = 0; cut <= bytes.length; cut++) {
            results.push(parse([bytes.slice(0, cut), bytes.slice(cut)]));
        }
    }
    return results;
}"""

READ_A_STREAM = """async (body) => {
    const { readSse } = await import("./playground/sse.js");
    const bytes = new TextEncoder().encode(body);
    const stream = new ReadableStream({
        start(controller) {
            for (let i = 0; i < bytes.length; i += 5) controller.enqueue(bytes.slice(i, i + 5));
            controller.close();
        },
    });
    const events = [];
    await readSse(stream, (data, name) => events.push([data, name]));
    return events;
}"""


@pytest.fixture
def page(open_page):
    page, _ = open_page()
    return page


@pytest.mark.parametrize("mode", ["two pieces, cut at every byte", "bytes"])
def test_events_survive_any_split(page, mode):
    results = page.evaluate(PARSE_SPLITS, [BODY, "bytes" if mode == "bytes" else "cuts"])
    assert results and all(events == EXPECTED for events in results), json.dumps(results, ensure_ascii=False)


def test_read_sse_reads_a_fetch_body(page):
    assert page.evaluate(READ_A_STREAM, BODY) == EXPECTED
