"""OpenAI's chat and text completion encoders, byte for byte: each event kind's SSE bytes and
the whole answer of a record, for one choice and several, text, thinking, calls and logprobs."""

from __future__ import annotations

import json

import pytest

from llmflow.generation import CallDelta, ChoiceEnd, ChoiceRecord, Final, GenerationRecord, Reasoning, Text
from llmflow.observability import RequestTimings
from llmflow.types import FinishReason, TokenLogprob, ToolCall, TopLogprob, Usage
from llmflow.wire.openai import ChatEncoder, CompletionsEncoder

USAGE = Usage(5, 3, 2)
USAGE_JSON = (
    '{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}'
)
HEAD = '{"id":"r1","object":"chat.completion.chunk","created":7,"model":"m",'
TEXT_HEAD = '{"id":"r1","object":"text_completion","created":7,"model":"m",'
CHOICE = '"choices":[{"index":%d,"delta":%s,"logprobs":%s,"finish_reason":%s}]'
TEXT_CHOICE = '"choices":[{"index":%d,"text":%s,"logprobs":%s,"finish_reason":%s}]'
LOGPROB = TokenLogprob("Hi", b"Hi", -0.5, (TopLogprob("Hi", b"Hi", -0.5),))


def sse(body: str) -> bytes:
    return f"data: {body}\n\n".encode()


def chat_event(index: int, delta: str, finish: str = "null", logprobs: str = "null", tail: str = "") -> bytes:
    return sse(HEAD + CHOICE % (index, delta, logprobs, finish) + tail + "}")


def text_event(index: int, text: str, finish: str = "null", logprobs: str = "null", tail: str = "") -> bytes:
    return sse(TEXT_HEAD + TEXT_CHOICE % (index, text, logprobs, finish) + tail + "}")


def record(*choices: ChoiceRecord, timings: RequestTimings | None = None) -> GenerationRecord:
    return GenerationRecord(list(choices), timings or RequestTimings(), USAGE, FinishReason.STOP)


def choice(index: int = 0, text: str = "Hello", **fields) -> ChoiceRecord:
    out = ChoiceRecord(index, parts=[text], finish_reason=FinishReason.STOP, usage=USAGE)
    for name, value in fields.items():
        setattr(out, name, value)
    return out


def chat(**options) -> ChatEncoder:
    return ChatEncoder(model="m", response_id="r1", created=7, **options)


def completions(**options) -> CompletionsEncoder:
    return CompletionsEncoder(model="m", response_id="r1", created=7, **options)


CHAT_STREAM = [
    # (encoder options, events, the bytes they make, opening included)
    (
        {},
        [Text("Hé"), Text(' "x"'), ChoiceEnd(0, "stop", USAGE), Final(record(choice()))],
        chat_event(0, '{"role":"assistant","content":""}')
        + chat_event(0, '{"content":"Hé"}')
        + chat_event(0, '{"content":" \\"x\\""}')
        + chat_event(0, "{}", '"stop"'),
    ),
    (
        {"include_usage": True},
        [Text("a"), ChoiceEnd(0, "length", USAGE), Final(record(choice()))],
        chat_event(0, '{"role":"assistant","content":""}', tail=',"usage":null')
        + chat_event(0, '{"content":"a"}', tail=',"usage":null')
        + chat_event(0, "{}", '"length"', tail=',"usage":null')
        + sse(HEAD + '"choices":[],"usage":' + USAGE_JSON + "}"),
    ),
    (
        {},
        [Reasoning("hmm"), Text("ok"), ChoiceEnd(0, "stop", USAGE), Final(record(choice()))],
        chat_event(0, '{"role":"assistant","content":""}')
        + chat_event(0, '{"reasoning_content":"hmm","reasoning":"hmm"}')
        + chat_event(0, '{"content":"ok"}')
        + chat_event(0, "{}", '"stop"'),
    ),
    (
        {},
        [
            CallDelta(0, "call_1", "f", ""),
            CallDelta(0, None, None, '{"a":1}'),
            ChoiceEnd(0, "tool_calls", USAGE),
            Final(record(choice())),
        ],
        chat_event(0, '{"role":"assistant","content":""}')
        + chat_event(
            0,
            '{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}',
        )
        + chat_event(0, '{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":1}"}}]}')
        + chat_event(0, "{}", '"tool_calls"'),
    ),
    (
        {"n": 2, "include_usage": True},
        [
            Text("a", choice=1),
            Text("b"),
            ChoiceEnd(1, "stop", USAGE),
            ChoiceEnd(0, "length", USAGE),
            Final(record(choice(0), choice(1))),
        ],
        chat_event(0, '{"role":"assistant","content":""}', tail=',"usage":null')
        + chat_event(1, '{"role":"assistant","content":""}', tail=',"usage":null')
        + chat_event(1, '{"content":"a"}', tail=',"usage":null')
        + chat_event(0, '{"content":"b"}', tail=',"usage":null')
        + chat_event(1, "{}", '"stop"', tail=',"usage":null')
        + chat_event(0, "{}", '"length"', tail=',"usage":null')
        + sse(HEAD + '"choices":[],"usage":' + USAGE_JSON + "}"),
    ),
    (
        {"with_logprobs": True},
        [Text("Hi", (LOGPROB,)), ChoiceEnd(0, "stop", USAGE), Final(record(choice()))],
        chat_event(0, '{"role":"assistant","content":""}')
        + chat_event(
            0,
            '{"content":"Hi"}',
            logprobs='{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],'
            '"top_logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105]}]}],"refusal":null}',
        )
        + chat_event(0, "{}", '"stop"'),
    ),
]


@pytest.mark.parametrize(("options", "events", "expected"), CHAT_STREAM)
def test_chat_stream_bytes(options, events, expected):
    encoder = chat(**options)
    assert encoder.opening() + b"".join(encoder.event(e) for e in events) == expected


def test_text_completion_stream_bytes():
    encoder = completions(n=2)
    events = [Text("a"), Text("b", choice=1), ChoiceEnd(0, "stop", USAGE), ChoiceEnd(1, "length", USAGE)]
    out = encoder.opening() + b"".join(encoder.event(e) for e in events)
    assert out == text_event(0, '"a"') + text_event(1, '"b"') + text_event(0, '""', '"stop"')
    timings = RequestTimings()
    timings.finish("stop", USAGE)
    last = encoder.event(Final(record(choice(0), choice(1), timings=timings)))
    assert last == text_event(1, '""', '"length"')
    with_timings = completions(with_timings=True)
    with_timings.event(ChoiceEnd(0, "stop", USAGE))
    body = json.loads(with_timings.event(Final(record(choice(), timings=timings)))[len(b"data: ") :])
    assert body["choices"][0]["finish_reason"] == "stop" and body["timings"] == timings.to_dict()


def test_whole_chat_answer():
    call = ToolCall("call_1", "f", '{"a":1}')
    answer = chat().whole(
        record(
            choice(0, "Hello", thinking=["hmm"]),
            choice(1, "", calls=[call], opened_calls=True),
        )
    )
    assert answer == {
        "id": "r1",
        "object": "chat.completion",
        "created": 7,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "refusal": None,
                    "annotations": [],
                    "reasoning_content": "hmm",
                    "reasoning": "hmm",
                },
                "logprobs": None,
                "finish_reason": "stop",
            },
            {
                "index": 1,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":1}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            },
        ],
        "usage": json.loads(USAGE_JSON),
    }


def test_whole_text_completion_with_logprobs_and_timings():
    timings = RequestTimings()
    answer = completions(with_logprobs=True, with_timings=True).whole(
        record(choice(0, "Hi", logprobs=[LOGPROB]), timings=timings)
    )
    assert answer["choices"] == [
        {
            "index": 0,
            "text": "Hi",
            "logprobs": {
                "tokens": ["Hi"],
                "token_logprobs": [-0.5],
                "top_logprobs": [{"Hi": -0.5}],
                "text_offset": [0],
            },
            "finish_reason": "stop",
        }
    ]
    assert answer["object"] == "text_completion" and answer["timings"] == timings.to_dict()


def test_an_answer_that_opened_a_call_but_closed_none_is_its_text():
    cut = choice(0, "", written=['<tool_call>{"na'], opened_calls=True, finish_reason=FinishReason.LENGTH)
    [only] = chat().whole(record(cut))["choices"]
    assert only["message"]["content"] == '<tool_call>{"na' and only["finish_reason"] == "length"
