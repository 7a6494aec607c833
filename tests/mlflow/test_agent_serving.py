"""A ResponsesAgent served for real: under MLflow's own AgentServer (a subprocess) and by
`llmflow serve`, streamed from `/invocations` and `/responses` with the `openai` client and plain
HTTP; both speak the same wire format."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from openai import OpenAI

from llmflow.server import load_served
from tests.mlflow.conftest import AGENT_NAME
from tests.mlflow.store import using
from tests.server.conftest import TIMEOUT_S, running, sse_events, wait_healthy, wait_until_idle
from tests.server.test_responses import check_events

#: greedy, though the two servers may still end one answer differently: the agent server runs the
#: one-at-a-time engine and `llmflow serve` the batching one, whose numbers need not match to the
#: last bit; so the shapes compare with the final event's kind folded (see `_shape`)
REQUEST = {"input": [{"role": "user", "content": "Say hi."}], "max_output_tokens": 6, "temperature": 0.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def agent_server(model_uri: str, tracking_uri: str) -> Iterator[str]:
    """`python -m llmflow.mlflow.agent_server MODEL` (MLflow's AgentServer), stopped on exit."""
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    command = [sys.executable, "-m", "llmflow.mlflow.agent_server", model_uri, "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def _http_events(url: str, path: str, body: dict) -> list[dict]:
    response = httpx.post(f"{url}{path}", json={**body, "stream": True}, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


#: a finished and a cut answer end in events of one shape; each stream's own ending is checked
#: against its answer (`check_events`, `_check_calls`)
ENDINGS = {"response.completed": "response.<ended>", "response.incomplete": "response.<ended>"}


def _shape(events: list[dict]) -> list[tuple[str, tuple[str, ...]]]:
    """What a client relies on: event types in order (deltas once, endings folded) and each
    one's keys."""
    shape = []
    for event in events:
        entry = (ENDINGS.get(event["type"], event["type"]), tuple(sorted(event)))
        if not shape or shape[-1] != entry:
            shape.append(entry)
    return shape


def _check_server(url: str) -> list[dict]:
    """Stream from /invocations and /responses with plain HTTP and the openai client."""
    invocations = _http_events(url, "/invocations", REQUEST)
    check_events(invocations)
    check_events(_http_events(url, "/responses", REQUEST))
    client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    with client.responses.stream(model=AGENT_NAME, **REQUEST) as stream:
        check_events([event.to_dict() for event in stream])
    streamed = [e.to_dict() for e in client.responses.create(model=AGENT_NAME, stream=True, **REQUEST)]
    check_events(streamed)
    whole = httpx.post(f"{url}/invocations", json=REQUEST, timeout=TIMEOUT_S).json()
    assert whole["object"] == "response" and whole["usage"]["output_tokens"] <= 6
    return invocations


@pytest.fixture(scope="module")
def served_agent(logged_agent, mlflow_store):
    with using(mlflow_store):
        served = load_served(f"models:/{AGENT_NAME}/{logged_agent.registered_model_version}")
    yield served
    served.llm.close()


def test_mlflow_agent_server_and_llmflow_serve_speak_the_same_format(
    logged_agent, mlflow_store, served_agent
):
    with agent_server(logged_agent.model_uri, mlflow_store.uri) as url:
        theirs = _check_server(url)
    assert served_agent.agent is not None and served_agent.engine_name == "llama_cpp_batched"
    with running(served_agent) as server:
        ours = _check_server(server.url)
    assert _shape(ours) == _shape(theirs)


def test_llmflow_serve_refuses_a_bad_agent_request_in_mlflows_shape(served_agent):
    with running(served_agent) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        bad = {**REQUEST, "custom_inputs": {"top_k": -1}}
        for stream in (False, True):
            response = http.post("/invocations", json={**bad, "stream": stream})
            assert response.status_code == 400 and "custom_inputs.top_k" in response.json()["message"]
        response = http.post("/responses", json=bad)
        assert response.status_code == 400 and response.json()["error"]["param"] == "custom_inputs.top_k"
        chat = {"model": AGENT_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert http.post("/v1/chat/completions", json=chat).status_code == 200  # the same LLM, every route


def test_llmflow_serve_batches_agent_streams_and_a_leaving_client_frees_its_sequence(served_agent):
    engine = served_agent.llm.engine
    body = {
        "input": [{"role": "user", "content": "Count to a hundred: 1, 2, 3,"}],
        "max_output_tokens": 400,
        "stream": True,
    }
    with running(served_agent) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        free = engine.stats().free_sequences
        streams = []
        for path in ("/invocations", "/responses"):
            response = http.send(http.build_request("POST", path, json=body), stream=True)
            lines = response.iter_lines()
            assert response.status_code == 200
            deltas = 0
            for line in lines:
                deltas += '"response.output_text.delta"' in line
                if deltas == 2:
                    break
            streams.append((response, lines))
        # both decode together (unless one already ended: a chat answer may end at any token)
        assert free - 2 <= engine.stats().free_sequences < free
        for response, _ in streams:
            response.close()
        wait_until_idle(http)
        assert engine.stats().free_sequences == free


CALL_REQUEST = {
    "input": [{"role": "user", "content": "Weather in Osaka?"}],
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20}},
                "required": ["city"],
            },
        }
    ],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "max_output_tokens": 120,
    "temperature": 0.0,
}


def _check_calls(url: str) -> list[dict]:
    """Stream a forced call from /invocations and /responses; the whole answer through the
    openai client."""
    for path in ("/invocations", "/responses"):
        events = _http_events(url, path, CALL_REQUEST)
        assert events[2]["type"] == "response.output_item.added"
        assert events[2]["item"]["type"] == "function_call"
        (item,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
        assert item["name"] == "get_weather" and "".join(deltas) == item["arguments"]
        if item["status"] == "completed":
            assert isinstance(json.loads(item["arguments"])["city"], str)
        assert (events[-1]["type"] == "response.completed") == (item["status"] == "completed")
    client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    whole = client.responses.create(model=AGENT_NAME, **CALL_REQUEST)
    assert [item.type for item in whole.output] == ["function_call"]
    return events


def test_both_servers_stream_an_agents_function_calls(logged_agent, mlflow_store, served_agent):
    with agent_server(logged_agent.model_uri, mlflow_store.uri) as url:
        theirs = _check_calls(url)
    with running(served_agent) as server:
        ours = _check_calls(server.url)
    assert _shape(ours) == _shape(theirs)
