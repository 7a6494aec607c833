"""Constrained decoding (issue 19) with logprobs and `n` (issue 20), on both llama.cpp engines:
the constraint decides which token is sampled while the logprobs stay the model's raw
distribution; each of `n` choices has its own constraint state; function calls stream per
choice."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import jsonschema

from llmflow.constraints import Constraint
from llmflow.generation import GenerationRequest
from llmflow.types import CancelToken

HELLO = [{"role": "user", "content": "Say hello."}]
COLOURS = ["red", "green", "blue"]
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": TIME}}]


def test_constrained_answer_with_logprobs(http, model_name):
    body = {
        "model": model_name, "messages": HELLO, "max_tokens": 8, "choice": ["zebra"],
        "logprobs": True, "top_logprobs": 3,
    }  # fmt: skip
    answer = http.post("/v1/chat/completions", json=body).json()
    choice = answer["choices"][0]
    assert choice["message"]["content"] == "zebra"
    entries = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == "zebra"
    # raw: the model's own distribution, not the mask's (which left one token: logprob 0)
    assert entries[0]["logprob"] < -1e-3
    assert all(len(e["top_logprobs"]) == 3 for e in entries)

    streamed = http.post("/v1/chat/completions", json={**body, "stream": True}).text
    events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    tokens = [
        e["token"]
        for event in events
        for c in event["choices"]
        if c["logprobs"]
        for e in c["logprobs"]["content"]
    ]
    assert "".join(tokens) == "zebra"


def test_n_choices_each_with_its_own_constraint(http, model_name):
    body = {
        "model": model_name, "messages": HELLO, "max_tokens": 8, "n": 4, "temperature": 1.5, "seed": 3,
        "choice": COLOURS, "logprobs": True,
    }  # fmt: skip
    answer = http.post("/v1/chat/completions", json=body).json()
    texts = [c["message"]["content"] for c in answer["choices"]]
    assert all(text in COLOURS for text in texts), texts
    assert all(c["finish_reason"] == "stop" for c in answer["choices"])
    assert all(c["logprobs"]["content"] for c in answer["choices"])

    streamed = http.post("/v1/chat/completions", json={**body, "stream": True}).text
    joined: dict[int, str] = defaultdict(str)
    for line in streamed.splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                joined[c["index"]] += c["delta"].get("content") or ""
    assert [joined[i] for i in range(4)] == texts


def test_n_text_completions_follow_a_regex(http, model_name):
    body = {"model": model_name, "prompt": "Number:", "max_tokens": 8, "n": 3, "temperature": 1.0,
            "seed": 9, "regex": "[0-9]{3}", "logprobs": 2}  # fmt: skip
    answer = http.post("/v1/completions", json=body).json()
    for c in answer["choices"]:
        assert re.fullmatch("[0-9]{3}", c["text"]), c["text"]
        assert len(c["logprobs"]["tokens"]) >= 1


def test_group_matchers_advance_apart(served_llm):
    llm = served_llm.llm
    request = llm.prepare(
        "Pick a colour:", {"max_tokens": 6, "temperature": 1.5, "seed": 5}, raw=True,
        constraint=Constraint.choice(COLOURS),
    )  # fmt: skip
    *_, final = llm.start(GenerationRequest(request, n=5), CancelToken())
    texts = {choice.index: choice.text for choice in final.record.choices}
    assert sorted(texts) == [0, 1, 2, 3, 4]
    assert all(text in COLOURS for text in texts.values()), texts


def test_streamed_tool_calls_per_choice(http, model_name):
    body = {
        "model": model_name, "messages": [{"role": "user", "content": "What time is it in Paris?"}],
        "tools": TOOLS, "tool_choice": "required", "max_tokens": 80, "n": 2, "seed": 1, "stream": True,
    }  # fmt: skip
    streamed = http.post("/v1/chat/completions", json=body).text
    arguments: dict[tuple[int, int], str] = defaultdict(str)
    names: dict[tuple[int, int], str] = {}
    finishes: dict[int, str] = {}
    for line in streamed.splitlines():
        if not line.startswith("data: {"):
            continue
        for c in json.loads(line[6:])["choices"]:
            for call in c["delta"].get("tool_calls") or ():
                key = (c["index"], call["index"])  # a choice may call several times
                if call.get("id"):
                    names[key] = call["function"]["name"]
                arguments[key] += call["function"]["arguments"]
            if c["finish_reason"]:
                finishes[c["index"]] = c["finish_reason"]
    assert sorted(finishes) == [0, 1]
    for key, name in names.items():
        assert name == "get_time"
        jsonschema.validate(json.loads(arguments[key]), TIME)
    assert {index for index, _ in names} == {i for i, f in finishes.items() if f == "tool_calls"}

    whole = http.post("/v1/chat/completions", json={**body, "stream": False}).json()
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    for c in whole["choices"]:
        if c["finish_reason"] == "tool_calls":
            assert c["message"]["tool_calls"][0]["function"]["name"] == "get_time"
