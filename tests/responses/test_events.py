"""The Responses events of one answer: OpenAI's sequence, numbering, ids, text and usage."""

from __future__ import annotations

import json

from llmflow.generation import ChoiceRecord, GenerationRecord
from llmflow.observability import RequestTimings
from llmflow.responses.events import ResponseEvents
from llmflow.tools import ToolCallChunk
from llmflow.types import FinishReason, ToolCall, Usage

USAGE = Usage(7, 3)


def _record(reason: FinishReason, text: str = "", calls: list[ToolCall] | None = None) -> GenerationRecord:
    """A generation's record: one answer, its text and the calls it opened."""
    choice = ChoiceRecord(0, parts=[text], finish_reason=reason, usage=USAGE, all_calls=calls or [])
    return GenerationRecord([choice], RequestTimings(), USAGE, reason)


def _stream(reason: FinishReason = FinishReason.STOP) -> list[dict]:
    events = ResponseEvents("smol", {"instructions": "Be brief.", "temperature": 0.0})
    out = events.opening()
    out += [events.delta("Hel"), json.loads(events.delta_json("lo ✓"))]
    return out + events.closing(_record(reason))


def test_a_stream_is_the_sequence_openai_sends():
    events = _stream()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:8])
    assert [e["delta"] for e in events[4:6]] == ["Hel", "lo ✓"]
    assert events[6]["text"] == "Hello ✓"
    done = events[8]["item"]
    assert done["status"] == "completed" and done["content"][0]["text"] == "Hello ✓"
    response = events[-1]["response"]
    assert response["status"] == "completed" and response["output"] == [done]
    assert response["usage"]["input_tokens"] == 7 and response["usage"]["output_tokens"] == 3
    assert response["usage"]["total_tokens"] == 10
    assert response["instructions"] == "Be brief." and response["temperature"] == 0.0
    assert response["id"] == events[0]["response"]["id"] and response["model"] == "smol"


def test_the_per_token_json_is_the_same_event():
    one, other = ResponseEvents("m"), ResponseEvents("m")
    other.item_id = one.item_id
    assert json.loads(one.delta_json('a "quoted" ✓\n')) == {
        **other.delta('a "quoted" ✓\n'),
        "item_id": one.item_id,
    }


def test_an_answer_cut_by_max_output_tokens_is_incomplete():
    events = _stream(FinishReason.LENGTH)
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_whole_answer_and_an_error_event():
    events = ResponseEvents("m")
    answer = events.answer(_record(FinishReason.STOP, "Hi."))
    assert answer["object"] == "response" and answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == "Hi." and answer["store"] is False
    error = events.error("broke", "engine_error")
    assert error["type"] == "error" and error["code"] == "engine_error" and error["message"] == "broke"


CALLS = [
    ToolCallChunk(0, "call_a", "get_weather", '{"ci'),
    ToolCallChunk(0, None, None, 'ty": "Osaka"}'),
    ToolCallChunk(1, "call_b", "get_time", "{}"),
]


def _call_stream(pieces: list, reason: FinishReason = FinishReason.STOP) -> list[dict]:
    events = ResponseEvents("smol", calls=True)
    out = events.opening()
    for piece in pieces:
        out += events.piece(piece)
    return out + events.closing(_record(reason))


def test_function_calls_stream_as_openai_streams_them():
    events = _call_stream(CALLS)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added, done = events[2]["item"], events[6]["item"]
    assert added == {**done, "status": "in_progress", "arguments": ""}
    assert done["type"] == "function_call" and done["status"] == "completed" and done["id"].startswith("fc_")
    assert (done["call_id"], done["name"], done["arguments"]) == (
        "call_a",
        "get_weather",
        '{"city": "Osaka"}',
    )
    assert "".join(e["delta"] for e in events[3:5]) == events[5]["arguments"] == done["arguments"]
    assert all(e["item_id"] == done["id"] and e["output_index"] == 0 for e in events[3:6])
    assert events[7]["output_index"] == 1 and events[10]["item"]["call_id"] == "call_b"
    response = events[-1]["response"]
    assert response["output"] == [done, events[10]["item"]] and response["status"] == "completed"


def test_text_before_a_call_is_a_message_item_closed_before_the_call():
    events = _call_stream(["Let me look.", CALLS[2]])
    types = [e["type"] for e in events]
    assert types[2:9] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    message, call = events[-1]["response"]["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == "Let me look."
    assert call["type"] == "function_call" and events[8]["output_index"] == 1


def test_an_answer_without_calls_or_text_still_has_its_message():
    events = _call_stream([])
    (message,) = events[-1]["response"]["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == ""


def test_a_call_cut_by_max_output_tokens_is_incomplete():
    events = _call_stream(CALLS[:1], FinishReason.LENGTH)
    (call,) = events[-1]["response"]["output"]
    assert call["status"] == "incomplete" and call["arguments"] == '{"ci'
    assert events[-1]["type"] == "response.incomplete"


def test_a_whole_answer_with_calls_equals_the_streams_last_event():
    def without_ids(response: dict) -> list[dict]:
        return [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]

    streamed = _call_stream(CALLS)[-1]["response"]
    opened = [ToolCall("call_a", "get_weather", '{"city": "Osaka"}'), ToolCall("call_b", "get_time", "{}")]
    whole = ResponseEvents("smol", calls=True).answer(_record(FinishReason.STOP, calls=opened))
    assert without_ids(whole) == without_ids(streamed) and whole["status"] == streamed["status"]
