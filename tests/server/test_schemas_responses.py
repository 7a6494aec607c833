"""Every Responses object and streamed event valid against the Open Responses specification (the
`openresponses-types` models, strict) and the `openai` SDK's types: text, function calls,
structured output, an answer cut by max_output_tokens (`incomplete`), errors before and after
streaming began, and the kept objects (`GET /v1/responses/{id}`, `input_items`).

Text and calls come from the embedded model, whose words differ between machines: only their
structure is checked. The scripted engine answers the same everywhere (its answer is longer than
the token limits here, so it is always cut); the failing one breaks in the middle of a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.server.conftest import sse_events
from tests.server.schema_checks import (
    beside_scripted_and_failing,
    check_error_body,
    check_event,
    check_item,
    check_response,
)
from tests.server.tool_schemas import TIME, WEATHER

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather forecast", "parameters": WEATHER},
    {"type": "function", "name": "get_time", "parameters": TIME, "strict": True},
]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
    "additionalProperties": False,
}

CASES = {
    "text": {"input": "Say hi.", "instructions": "Be brief.", "max_output_tokens": 12},
    "tool calls": {
        "input": "What is the weather in Osaka for the next 3 days?",
        "tools": TOOLS,
        "tool_choice": "required",
        "max_output_tokens": 96,
    },
    "structured output": {
        "input": "Name a city.",
        "text": {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}},
        "max_output_tokens": 48,
    },
    "incomplete": {"model": "scripted", "input": "Tell me about Osaka.", "max_output_tokens": 5},
    "incomplete call": {
        "input": "What time is it in Tokyo?",
        "tools": TOOLS,
        "tool_choice": {"type": "function", "name": "get_time"},
        "max_output_tokens": 3,
    },
}


@pytest.fixture(scope="module")
def http(default_served) -> Iterator[httpx.Client]:
    with beside_scripted_and_failing(default_served) as client:
        yield client


def body(default_served, case: str, **extra) -> dict:
    return {"model": default_served.name, "temperature": 0, **CASES[case], **extra}


def streamed(http: httpx.Client, request: dict) -> list[dict]:
    response = http.post("/v1/responses", json={**request, "stream": True})
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


@pytest.mark.parametrize("case", list(CASES))
def test_a_whole_response_is_valid(http, default_served, case):
    response = http.post("/v1/responses", json=body(default_served, case))
    assert response.status_code == 200, response.text
    parsed = check_response(response.json())
    assert parsed.status in ("completed", "incomplete") and parsed.completed_at is not None
    assert parsed.temperature == 0 and isinstance(parsed.top_p, float) and parsed.store is True
    if case.startswith("incomplete"):
        assert parsed.status == "incomplete" and parsed.incomplete_details.reason == "max_output_tokens"
    if case == "tool calls":
        assert {item.type for item in parsed.output} == {"function_call"}


@pytest.mark.parametrize("case", list(CASES))
def test_every_streamed_event_is_valid(http, default_served, case):
    events = streamed(http, body(default_served, case))
    kinds = [check_event(event) for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    final = events[-1]["response"]
    if case.startswith("incomplete"):
        assert final["status"] == "incomplete"
    if case == "tool calls":
        assert "response.function_call_arguments.done" in kinds
    assert final["completed_at"] >= final["created_at"]


def test_an_error_after_streaming_began_is_a_valid_error_event(http):
    events = streamed(http, {"model": "failing", "input": "Hi", "max_output_tokens": 200})
    kinds = [check_event(event) for event in events]
    assert kinds[-1] == "error" and "response.output_text.delta" in kinds
    error = events[-1]
    assert error["code"] == error["error"]["code"] and error["message"] == error["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "status", "param"),
    [
        ({"temperature": -1}, 400, "temperature"),
        ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        ({"previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
    ],
)
def test_errors_before_streaming_are_openai_error_bodies(http, default_served, extra, status, param):
    for stream in (False, True):
        response = http.post(
            "/v1/responses", json={**body(default_served, "text"), **extra, "stream": stream}
        )
        assert response.status_code == status and response.headers["content-type"] == "application/json"
        check_error_body(response.json())
        assert response.json()["error"]["param"] == param


def test_kept_objects_are_valid(http, default_served):
    time = {"tool_choice": {"type": "function", "name": "get_time"}}
    first = http.post("/v1/responses", json=body(default_served, "tool calls", **time)).json()
    call = next(item for item in first["output"] if item["type"] == "function_call")
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny."}
    second = http.post(
        "/v1/responses",
        json={**body(default_served, "text"), "input": [answer], "previous_response_id": first["id"]},
    ).json()
    kept = http.get(f"/v1/responses/{second['id']}").json()
    check_response(kept)
    assert kept == second and kept["previous_response_id"] == first["id"]
    page = http.get(f"/v1/responses/{second['id']}/input_items", params={"order": "asc"}).json()
    assert page["object"] == "list" and page["has_more"] is False
    for item in page["data"]:
        check_item(item)
    types = [item["type"] for item in page["data"]]
    assert types[0] == "message" and types[-1] == "function_call_output" and "function_call" in types


def test_the_agent_server_route_answers_valid_objects_too(http):
    agent = {"input": [{"role": "user", "content": "Hi"}], "custom_inputs": {"max_tokens": 4}}
    whole = http.post("/responses", json=agent)
    assert whole.status_code == 200, whole.text
    assert check_response(whole.json()).store is False  # a ResponsesAgent keeps nothing
    response = http.post("/responses", json={**agent, "stream": True})
    events = [json.loads(event) for event in sse_events(response.text)[:-1]]
    assert [check_event(event) for event in events][-1] in ("response.completed", "response.incomplete")
