"""MLflow's chunk dicts and the Responses encoder, byte for byte: each event's SSE bytes (and
chunk dict), the last chunk with calls and timings, the whole response equal to the stream's
last event."""

from __future__ import annotations

import json

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from llmflow.errors import QueueFull
from llmflow.generation import CallDelta, ChoiceEnd, ChoiceRecord, Final, GenerationRecord, Reasoning, Text
from llmflow.observability import RequestTimings
from llmflow.responses.events import ResponseEvents
from llmflow.types import FinishReason, TokenLogprob, ToolCall, Usage
from llmflow.wire.mlflow_chunks import MlflowChunksEncoder
from llmflow.wire.responses import ResponsesEncoder

USAGE = Usage(5, 3)
USAGE_DICT = {
    "prompt_tokens": 5,
    "completion_tokens": 3,
    "total_tokens": 8,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def record(reason=FinishReason.STOP, text="Hi", calls=(), timings=None) -> GenerationRecord:
    choice = ChoiceRecord(
        0, parts=[text], finish_reason=reason, usage=USAGE, calls=list(calls), all_calls=list(calls)
    )
    return GenerationRecord([choice], timings or RequestTimings(), USAGE, reason)


def test_mlflow_chunks_per_event():
    encoder = MlflowChunksEncoder()
    scored = TokenLogprob("Hi", b"Hi", -0.5)
    table = [
        (Text('é "x"'), {"content": 'é "x"'}, b'data: {"content":"\xc3\xa9 \\"x\\""}\n\n'),
        (
            Text("Hi", (scored,)),
            {"content": "Hi", "logprobs": [scored.to_dict()]},
            b'data: {"content":"Hi","logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],'
            b'"top_logprobs":[]}]}\n\n',
        ),
        (Reasoning("hmm"), None, b""),
        (CallDelta(0, "call_1", "f", "{}"), None, b""),
        (ChoiceEnd(0, "stop", USAGE), None, b""),
        (
            Final(record(FinishReason.LENGTH)),
            {"content": "", "finish_reason": "length", "usage": USAGE_DICT},
            b'data: {"content":"","finish_reason":"length","usage":{"prompt_tokens":5,"completion_tokens":3,'
            b'"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}}\n\n',
        ),
    ]
    for event, chunk, sse in table:
        assert encoder.chunk(event) == chunk
        assert encoder.event(event) == sse


def test_the_last_mlflow_chunk_carries_calls_and_timings():
    timings = RequestTimings()
    call = ToolCall("call_1", "weather", '{"city":"Osaka"}')
    last = MlflowChunksEncoder(with_timings=True).chunk(Final(record(calls=[call], timings=timings)))
    assert last == {
        "content": "",
        "finish_reason": "tool_calls",
        "usage": USAGE_DICT,
        "tool_calls": [call.to_openai()],
        "timings": timings.to_dict(),
    }


def test_mlflow_stream_errors_keep_the_models_code():
    refused = MlflowChunksEncoder.error(MlflowException("bad row", error_code=INVALID_PARAMETER_VALUE))
    assert json.loads(refused[len(b"data: ") :])["error"]["code"] == "INVALID_PARAMETER_VALUE"
    limit = json.loads(MlflowChunksEncoder.error(QueueFull(1))[len(b"data: ") :])
    assert limit["error"]["type"] == "rate_limit_error"


def _sse(events: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events)


def test_responses_stream_bytes_are_its_events():
    ended: list[dict] = []
    encoder = ResponsesEncoder(ResponseEvents("m"), ended.append)
    twin = ResponseEvents("m")
    twin.response_id, twin.item_id, twin.created_at = (
        encoder.events.response_id,
        encoder.events.item_id,
        encoder.events.created_at,
    )
    assert encoder.opening() == _sse(twin.opening())
    assert json.loads(encoder.event(Text("Hé")).removeprefix(b"data: ")) == twin.delta("Hé")
    assert encoder.event(ChoiceEnd(0, "stop", USAGE)) == b""
    final = record(text="Hé")
    closing = encoder.event(Final(final))
    expected = twin.closing(final)
    got = [json.loads(line.removeprefix(b"data: ")) for line in closing.split(b"\n\n") if line]
    for event in (*got, *expected):
        event.get("response", {}).pop("completed_at", None)
    assert got == expected
    assert ended[0]["id"] == encoder.events.response_id and ended[0]["status"] == "completed"


def test_a_whole_response_is_stored_as_it_is_sent():
    ended: list[dict] = []
    whole = ResponsesEncoder(ResponseEvents("m"), ended.append).whole(record(text="Hi."))
    assert ended == [whole] and whole["output"][0]["content"][0]["text"] == "Hi."
