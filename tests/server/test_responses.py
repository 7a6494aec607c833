"""POST /v1/responses (OpenAI's Responses API, stateless) and MLflow AgentServer's /responses,
with the official client and raw HTTP, on the embedded model."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tests.extras import need
from tests.server.conftest import TIMEOUT_S, sse_events

OPENING = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
ENDS = ("response.completed", "response.incomplete")


def check_events(events: list[dict]) -> tuple[str, dict]:
    """OpenAI's order, numbered, one item; returns the text and the final response."""
    types = [e["type"] for e in events]
    assert types[:4] == OPENING and types[-4:-1] == CLOSING and types[-1] in ENDS, types
    assert set(types[4:-4]) <= {"response.output_text.delta"}
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events[4:-4])
    response = events[-1]["response"]
    assert response["output"][0]["content"][0]["text"] == text
    usage = response["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert (response["status"] == "completed") == (types[-1] == "response.completed")
    return text, response


def test_the_openai_client_streams_a_response(client, model_name):
    with client.responses.stream(
        model=model_name, input="Say hi.", instructions="Be brief.", max_output_tokens=8, temperature=0
    ) as stream:
        events = [event.to_dict() for event in stream]
    text, response = check_events(events)
    assert text and response["usage"]["output_tokens"] <= 8
    assert response["instructions"] == "Be brief." and response["model"] == model_name
    if response["status"] == "incomplete":
        assert response["usage"]["output_tokens"] == 8
        assert response["incomplete_details"]["reason"] == "max_output_tokens"


def test_a_whole_response_equals_the_stream_at_temperature_0(client, model_name):
    request = {
        "model": model_name,
        "input": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "Another one."}]},
        ],
        "max_output_tokens": 6,
        "temperature": 0,
    }
    client.responses.create(**request)  # the same prompt-cache state for the next two (see test_openai)
    whole = client.responses.create(**request)
    streamed = [event.to_dict() for event in client.responses.create(**request, stream=True)]
    text, response = check_events(streamed)
    assert whole.output_text == text
    assert (
        whole.status == response["status"] and whole.usage.output_tokens == response["usage"]["output_tokens"]
    )
    assert whole.store is True and whole.object == "response"  # kept by default, as OpenAI's


def test_the_raw_stream_is_data_lines_ending_with_done(http, model_name):
    body = {"model": model_name, "input": "Hi", "max_output_tokens": 3, "stream": True, "top_k": 1}
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    check_events([json.loads(e) for e in events[:-1]])


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": -1}, "temperature"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        ({"frequency_penalty": 1}, "frequency_penalty"),
    ],
)
def test_bad_requests_are_400_naming_the_field_before_any_byte(http, model_name, extra, param):
    for stream in (False, True):
        body = {"model": model_name, "input": "Hi", "stream": stream, **extra}
        response = http.post("/v1/responses", json=body)
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["param"] == param


def test_the_client_sees_an_unknown_previous_response_id_as_not_found(client, model_name):
    with pytest.raises(openai.NotFoundError, match="previous_response_id"):
        client.responses.create(model=model_name, input="Hi", previous_response_id="resp_1")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="Hi")


def test_agent_server_route_takes_a_responses_agent_request(http):
    body = {"input": [{"role": "user", "content": "Hi"}], "custom_inputs": {"max_tokens": 3}, "stream": True}
    events = sse_events(http.post("/responses", json=body).text)
    assert events[-1] == "[DONE]"
    _, response = check_events([json.loads(e) for e in events[:-1]])
    assert response["usage"]["output_tokens"] <= 3
    whole = http.post("/responses", json={**body, "stream": False}).json()
    assert whole["object"] == "response" and whole["usage"]["output_tokens"] <= 3
    refused = http.post(
        "/responses", json={"input": [{"role": "user", "content": "Hi"}], "custom_inputs": {"x": 1}}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "custom_inputs.x"
    assert http.post("/responses", content=b"[1, 2]").status_code == 400


def test_the_openai_agents_sdk_runs_an_agent_without_tools(server, model_name):
    sdk = need("agents", "test")
    sdk.set_tracing_disabled(True)  # the SDK would send its traces to OpenAI
    client = openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S
    )
    agent = sdk.Agent(
        name="Assistant",
        instructions="Reply with one short sentence.",
        model=sdk.OpenAIResponsesModel(model=model_name, openai_client=client),
        model_settings=sdk.ModelSettings(max_tokens=96, temperature=0),
    )

    async def whole() -> str:
        return (await sdk.Runner.run(agent, "Say hi.")).final_output

    async def streamed() -> str:
        run = sdk.Runner.run_streamed(agent, "Say hi.")
        deltas = [
            event.data.delta
            async for event in run.stream_events()
            if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
        ]
        assert "".join(deltas) == run.final_output
        return run.final_output

    async def both() -> None:  # one event loop: the async client belongs to it
        for run in (whole, streamed):
            try:
                assert await run()
            except sdk.exceptions.ModelBehaviorError as exc:  # as with OpenAI: an answer cut by
                assert "max_output_tokens" in str(exc)  # max_output_tokens is not a final output

    asyncio.run(both())


def test_an_error_after_streaming_began_is_a_responses_error_event_then_done(start_server, model_name):
    # a schema no answer can meet within the time limit: the grammar forbids ending early on any
    # machine and any build, where free sampling may end an answer at once
    endless = {"type": "array", "items": {"type": "integer"}, "minItems": 1000}
    fmt = {"type": "json_schema", "name": "numbers", "schema": endless, "strict": True}
    body = {"model": model_name, "input": "Count.", "max_output_tokens": 2000, "stream": True}
    with (
        start_server(request_timeout_s=1.0) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        events = sse_events(http.post("/v1/responses", json={**body, "text": {"format": fmt}}).text)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])
    assert error["type"] == "error" and error["code"] == "timeout" and error["message"]
    parsed = [json.loads(e) for e in events[:-2]]
    assert [e["sequence_number"] for e in [*parsed, error]] == list(range(len(parsed) + 1))
