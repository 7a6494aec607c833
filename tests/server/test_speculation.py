"""Speculative decoding over HTTP, on both llama.cpp engines with it turned on: a request's
`"speculative": false` gives the same answer as speculation on, a bad value is a 400 naming the
field, and /metrics counts the draft tokens proposed and accepted."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from llmflow import LLM
from llmflow.server import ServedModel
from llmflow.server.uvicorn_server import BackgroundServer
from tests.server.conftest import TIMEOUT_S, running

COPY = "Repeat exactly, five times: the quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module", params=["llama_cpp_batched", "llama_cpp"])
def server(request) -> Iterator[BackgroundServer]:
    options = {"n_ctx": 1024, "speculative": True}
    if request.param == "llama_cpp_batched":
        options["parallel"] = 2
    llm = LLM.load(engine=request.param, engine_options=options)
    try:
        with running(ServedModel.from_llm(llm)) as background:
            yield background
    finally:
        llm.close()


def counter(text: str, name: str) -> float:
    lines = [line for line in text.splitlines() if line.startswith(name + "{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_opting_out_gives_the_same_answer_and_metrics_count_drafts(server):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": COPY}]
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        before = http.get("/metrics").text
        answers = [
            client.chat.completions.create(
                model=model, messages=messages, max_tokens=64, temperature=0, extra_body={"speculative": on}
            )
            for on in (False, True)
        ]
        after = http.get("/metrics").text
    off, on = (a.choices[0].message.content for a in answers)
    assert on == off
    proposed = counter(after, "llmflow_draft_tokens_proposed_total") - counter(
        before, "llmflow_draft_tokens_proposed_total"
    )
    accepted = counter(after, "llmflow_draft_tokens_accepted_total") - counter(
        before, "llmflow_draft_tokens_accepted_total"
    )
    assert 0 <= accepted <= proposed and proposed > 0


def test_a_bad_speculative_value_is_a_400_naming_it(server):
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        body = {"model": model, "prompt": "Hi", "max_tokens": 2, "speculative": "sometimes"}
        response = http.post("/v1/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "speculative"
