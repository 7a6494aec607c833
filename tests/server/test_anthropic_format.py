"""The Anthropic Messages encoder (`MessagesEncoder`) byte for byte: scripted items in (as the
streaming core and the call splitter give them, turned into a generation's events), SSE bytes
out, every event valid against the `anthropic` SDK's types; the whole answer's Message object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmflow.errors import InvalidRequest, QueueFull, QueueTimeout
from llmflow.generation import CallDelta, ChoiceEnd, ChoiceRecord, Final, GenerationRecord, Reasoning, Text
from llmflow.observability import RequestTimings
from llmflow.tools import ToolCallChunk
from llmflow.types import Chunk, Completion, FinishReason, ToolCall, Usage
from llmflow.wire.anthropic import MessagesEncoder
from tests.server.anthropic_checks import check_stream, checked_error, checked_event, checked_message, frames

STOP, LENGTH = FinishReason.STOP, FinishReason.LENGTH
ID = "msg_0123456789abcdef01234567"


def _events(items: list[Any]) -> list[Any]:
    """A generation's events for `items` (chunks and call pieces, the last one final)."""
    *body, last = items
    choice = ChoiceRecord(
        0, finish_reason=last.finish_reason, usage=last.usage, stop_sequence=last.stop_sequence
    )
    calls: dict[int, list[Any]] = {}
    events: list[Any] = []
    for item in body:
        if isinstance(item, ToolCallChunk):
            calls.setdefault(item.index, [item.id, item.name, ""])[2] += item.arguments
            events.append(CallDelta(item.index, item.id, item.name, item.arguments))
        elif item.reasoning:
            events.append(Reasoning(item.reasoning))
        else:
            events.append(Text(item.text))
    choice.calls = [ToolCall(*calls[i]) for i in sorted(calls)]
    record = GenerationRecord([choice], RequestTimings(), last.usage, last.finish_reason)
    return [*events, ChoiceEnd(0, choice.finish, last.usage, last.stop_sequence), Final(record)]


def _stream(items: list[Any], input_tokens: int = 7, stop_sequences: tuple[str, ...] = ()) -> bytes:
    """What the server writes for `items` (the last one final)."""
    encoder = MessagesEncoder("smol", input_tokens, stop_sequences)
    encoder.id = ID
    return encoder.opening() + b"".join(encoder.event(e) for e in _events(items))


def _sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()
        for name, payload in events
    )


def _usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output_tokens,
    }


def _start(input_tokens: int = 7) -> list[tuple[str, dict[str, Any]]]:
    message = {
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": "smol",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(input_tokens, 0),
    }
    return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]


def _block(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, kind: str, key: str, piece: str) -> tuple[str, dict[str, Any]]:
    delta = {"type": "content_block_delta", "index": index, "delta": {"type": kind, key: piece}}
    return "content_block_delta", delta


def _text(index: int, piece: str) -> tuple[str, dict[str, Any]]:
    return _delta(index, "text_delta", "text", piece)


def _stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def _end(reason: str, usage: dict[str, int], sequence: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": usage,
    }
    return [("message_delta", delta), ("message_stop", {"type": "message_stop"})]


def _seq(*parts: Any) -> list[tuple[str, dict[str, Any]]]:
    """Events and lists of events, as one list."""
    return [event for part in parts for event in (part if isinstance(part, list) else [part])]


CALL_ID = "call_00112233445566778899aabb"
TOOLU_ID = "toolu_00112233445566778899aabb"

CASES: dict[str, tuple[list[Any], tuple[str, ...], list[tuple[str, dict[str, Any]]]]] = {
    "text": (
        [Chunk("Hi"), Chunk(" 🏯\n"), Chunk("", STOP, Usage(7, 3))],
        (),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "Hi"),
            _text(0, " 🏯\n"),
            _stop(0),
            _end("end_turn", _usage(7, 3)),
        ),
    ),
    "cut at max_tokens": (
        [Chunk("Once"), Chunk("", LENGTH, Usage(7, 2))],
        (),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "Once"),
            _stop(0),
            _end("max_tokens", _usage(7, 2)),
        ),
    ),
    "a stop sequence of the request": (
        [Chunk("A, B"), Chunk("", STOP, Usage(7, 4), stop_sequence=", C")],
        (", C",),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "A, B"),
            _stop(0),
            _end("stop_sequence", _usage(7, 4), ", C"),
        ),
    ),
    "a stop string the request did not give ends the turn": (
        [Chunk("A"), Chunk("", STOP, Usage(7, 2), stop_sequence="<|end|>")],
        (),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "A"),
            _stop(0),
            _end("end_turn", _usage(7, 2)),
        ),
    ),
    "prompt tokens from the cache": (
        [Chunk("x"), Chunk("", STOP, Usage(7, 1, cached_tokens=5))],
        (),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "x"),
            _stop(0),
            _end("end_turn", _usage(2, 1, cached=5)),
        ),
    ),
    "thinking, then text": (
        [
            Chunk("", reasoning="Hm."),
            Chunk("", reasoning=" Ok."),
            Chunk("Yes."),
            Chunk("", STOP, Usage(7, 5)),
        ],
        (),
        _seq(
            _start(),
            _block(0, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(0, "thinking_delta", "thinking", "Hm."),
            _delta(0, "thinking_delta", "thinking", " Ok."),
            _stop(0),
            _block(1, {"type": "text", "text": ""}),
            _text(1, "Yes."),
            _stop(1),
            _end("end_turn", _usage(7, 5)),
        ),
    ),
    "text, then two calls": (
        [
            Chunk("Let me look."),
            ToolCallChunk(0, CALL_ID, "get_weather", ""),
            ToolCallChunk(0, None, None, '{"city": '),
            ToolCallChunk(0, None, None, '"Oslo"}'),
            ToolCallChunk(1, "call_ff", "get_time", "{}"),
            Chunk("", STOP, Usage(7, 20)),
        ],
        (),
        _seq(
            _start(),
            _block(0, {"type": "text", "text": ""}),
            _text(0, "Let me look."),
            _stop(0),
            _block(1, {"type": "tool_use", "id": TOOLU_ID, "name": "get_weather", "input": {}}),
            _delta(1, "input_json_delta", "partial_json", '{"city": '),
            _delta(1, "input_json_delta", "partial_json", '"Oslo"}'),
            _stop(1),
            _block(2, {"type": "tool_use", "id": "toolu_ff", "name": "get_time", "input": {}}),
            _delta(2, "input_json_delta", "partial_json", "{}"),
            _stop(2),
            _end("tool_use", _usage(7, 20)),
        ),
    ),
    "a call cut at max_tokens": (
        [ToolCallChunk(0, CALL_ID, "get_weather", '{"ci'), Chunk("", LENGTH, Usage(7, 9))],
        (),
        _seq(
            _start(),
            _block(0, {"type": "tool_use", "id": TOOLU_ID, "name": "get_weather", "input": {}}),
            _delta(0, "input_json_delta", "partial_json", '{"ci'),
            _stop(0),
            _end("max_tokens", _usage(7, 9)),
        ),
    ),
    "nothing but the end": (
        [Chunk("", STOP, Usage(7, 1))],
        (),
        _seq(_start(), _end("end_turn", _usage(7, 1))),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_stream_is_byte_exact(name):
    items, stop_sequences, expected = CASES[name]
    assert _stream(items, stop_sequences=stop_sequences) == _sse(*expected)


@pytest.mark.parametrize("name", [name for name in CASES if "cut" not in name])
def test_every_event_is_of_the_sdks_types_and_adds_up(name):
    items, stop_sequences, _ = CASES[name]
    message = check_stream(frames(_stream(items, stop_sequences=stop_sequences).decode()))
    text = "".join(i.text for i in items if isinstance(i, Chunk))
    assert "".join(b.text for b in message.content if b.type == "text") == text


def test_the_first_events_literally():
    raw = _stream([Chunk("Hi"), Chunk("", STOP, Usage(3, 2))], input_tokens=3)
    assert raw.decode() == (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_0123456789abcdef01234567","type":"message",'
        '"role":"assistant","model":"smol","content":[],"stop_reason":null,"stop_sequence":null,'
        '"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
        '"output_tokens":0}}}\n\n'
        "event: ping\n"
        'data: {"type":"ping"}\n\n'
        "event: content_block_start\n"
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'
        "event: content_block_stop\n"
        'data: {"type":"content_block_stop","index":0}\n\n'
        "event: message_delta\n"
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
        '"output_tokens":2}}\n\n'
        "event: message_stop\n"
        'data: {"type":"message_stop"}\n\n'
    )


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (
            InvalidRequest.single("messages", "bad"),
            "invalid_request_error",
            "invalid messages: messages: bad",
        ),
        (QueueFull(4), "rate_limit_error", None),
        (QueueTimeout(2.0), "overloaded_error", None),
        (RuntimeError("secret detail"), "api_error", "internal error (RuntimeError); see the server log"),
    ],
)
def test_an_error_in_the_stream_is_an_error_event(error, kind, message):
    [(name, payload)] = frames(MessagesEncoder("smol", 1).error(error).decode())
    assert name == "error"
    detail = checked_error(payload, kind)
    checked_event(name, payload)
    if message is not None:
        assert detail["message"] == message


WHOLE: dict[str, tuple[Completion, str, list[ToolCall], tuple[str, ...], dict[str, Any]]] = {
    "text": (
        Completion("Hi there", STOP, Usage(7, 3)),
        "Hi there",
        [],
        (),
        {"content": [{"type": "text", "text": "Hi there"}], "stop_reason": "end_turn", "stop_sequence": None},
    ),
    "thinking and text": (
        Completion("Yes.", STOP, Usage(7, 3), reasoning="Hm."),
        "Yes.",
        [],
        (),
        {
            "content": [
                {"type": "thinking", "thinking": "Hm.", "signature": ""},
                {"type": "text", "text": "Yes."},
            ],
            "stop_reason": "end_turn",
            "stop_sequence": None,
        },
    ),
    "a call": (
        Completion('{"tool_calls": [...]}', STOP, Usage(7, 12)),
        "",
        [ToolCall(CALL_ID, "get_weather", '{"city": "Oslo"}')],
        (),
        {
            "content": [
                {"type": "tool_use", "id": TOOLU_ID, "name": "get_weather", "input": {"city": "Oslo"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
        },
    ),
    "a stop sequence": (
        Completion("A, B", STOP, Usage(7, 4), stop_sequence="C"),
        "A, B",
        [],
        ("C", "D"),
        {"content": [{"type": "text", "text": "A, B"}], "stop_reason": "stop_sequence", "stop_sequence": "C"},
    ),
    "cut": (
        Completion("Once upon", LENGTH, Usage(7, 2, cached_tokens=4)),
        "Once upon",
        [],
        (),
        {
            "content": [{"type": "text", "text": "Once upon"}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
        },
    ),
}


@pytest.mark.parametrize("name", list(WHOLE))
def test_the_whole_answer(name):
    completion, text, calls, stop_sequences, expected = WHOLE[name]
    fmt = MessagesEncoder("smol", 7, stop_sequences)
    choice = ChoiceRecord(0, parts=[text], thinking=[completion.reasoning], calls=list(calls))
    choice.finish_reason, choice.stop_sequence = completion.finish_reason, completion.stop_sequence
    record = GenerationRecord([choice], RequestTimings(), completion.usage, completion.finish_reason)
    answer = fmt.whole(record)
    usage = completion.usage
    cached = usage.cached_tokens
    assert answer == {
        "id": fmt.id,
        "type": "message",
        "role": "assistant",
        "model": "smol",
        **expected,
        "usage": _usage(usage.prompt_tokens - cached, usage.completion_tokens, cached),
    }
    assert list(answer) == ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"]
    checked_message(answer)
