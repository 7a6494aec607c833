"""OpenAI's `n`: several answers per request, streamed (an `index` on every chunk) and whole, on
both llama.cpp engines, with the official client; the batching engine computes the prompt once."""

from __future__ import annotations

import threading
from collections import defaultdict

from llmflow.generation import Final, GenerationRequest
from llmflow.types import CancelToken

HELLO = [{"role": "user", "content": "Tell me a short story about a cat."}]
SAMPLED = {"max_tokens": 8, "temperature": 1.0, "seed": 42}


def _streamed(client, model_name, n, **extra):
    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=HELLO,
            n=n,
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
    )
    texts: dict[int, str] = defaultdict(str)
    finishes: dict[int, list[str]] = defaultdict(list)
    for chunk in chunks[:-1]:
        assert len(chunk.choices) == 1
        choice = chunk.choices[0]
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes[choice.index].append(choice.finish_reason)
    return texts, finishes, chunks


def test_n_choices_whole_and_streamed_agree(client, model_name):
    whole = client.chat.completions.create(model=model_name, messages=HELLO, n=3, **SAMPLED)
    texts, finishes, chunks = _streamed(client, model_name, 3, **SAMPLED)

    assert [c.index for c in whole.choices] == [0, 1, 2]
    assert {i: [f] for i, f in enumerate(c.finish_reason for c in whole.choices)} == dict(finishes)
    assert [texts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role == "assistant"]
    assert sorted(roles) == [0, 1, 2]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == whole.usage.completion_tokens
    assert 3 <= usage.completion_tokens <= 3 * 8
    single = client.chat.completions.create(model=model_name, messages=HELLO, **SAMPLED)
    assert usage.prompt_tokens == single.usage.prompt_tokens  # the prompt counts once


def test_each_choice_has_its_own_seed(client, model_name):
    answer = client.chat.completions.create(model=model_name, messages=HELLO, n=4, **SAMPLED)
    texts = [c.message.content for c in answer.choices]
    assert len(set(texts)) > 1
    again = client.chat.completions.create(model=model_name, messages=HELLO, n=4, **SAMPLED)
    assert [c.message.content for c in again.choices] == texts  # a seed makes all of them repeatable


def test_the_first_choice_is_the_single_answer_with_that_seed(client, model_name, served_llm):
    n4 = client.chat.completions.create(model=model_name, messages=HELLO, n=2, **SAMPLED)
    one = client.chat.completions.create(model=model_name, messages=HELLO, **SAMPLED)
    other = client.chat.completions.create(model=model_name, messages=HELLO, **{**SAMPLED, "seed": 43})

    assert n4.choices[0].message.content == one.choices[0].message.content
    if served_llm.engine_name == "llama_cpp":  # the same path exactly; batched: see the engine test
        assert n4.choices[1].message.content == other.choices[0].message.content


def test_completions_n(http, model_name):
    body = {"model": model_name, "prompt": "Once upon a time", "n": 2, **SAMPLED}
    whole = http.post("/v1/completions", json=body).json()
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    streamed = http.post("/v1/completions", json={**body, "stream": True}).text
    assert '"index":1' in streamed and '"index":0' in streamed


def test_n_over_the_server_limit_is_a_400(http, model_name, start_server):
    for n in (0, 9):
        answer = http.post("/v1/chat/completions", json={"model": model_name, "messages": HELLO, "n": n})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "n"
    with start_server(max_n=2) as server:
        import httpx

        answer = httpx.post(
            f"{server.url}/v1/chat/completions", json={"model": model_name, "messages": HELLO, "n": 3}
        )
        assert answer.status_code == 400 and "2" in answer.json()["error"]["message"]


def test_batched_engine_computes_the_prompt_once(default_served):
    llm = default_served.llm
    prompt = "Shared prompt. " * 40
    request = llm.prepare(prompt, {"max_tokens": 4, "temperature": 0.8, "seed": 1}, raw=True)
    before = llm.engine.stats().tokens_decoded_total
    events = list(llm.start(GenerationRequest(request, n=4), CancelToken()))
    decoded = llm.engine.stats().tokens_decoded_total - before

    usage = events[-1].record.usage
    assert usage is not None and usage.prompt_tokens == len(request.prompt_ids)
    generated = usage.completion_tokens
    # once the prompt, then each other choice its last prompt token, then the generated tokens fed
    # back: far below 4 prompts (a cached prefix of an earlier request may make it less still)
    assert decoded <= len(request.prompt_ids) + 3 + generated
    assert {e.choice for e in events if not isinstance(e, Final)} == {0, 1, 2, 3}


def test_closing_a_choices_stream_stops_every_choice(default_served):
    llm = default_served.llm
    request = llm.prepare("Count to a thousand.", {"max_tokens": 500, "temperature": 0.8}, raw=True)
    cancel = CancelToken()
    stream = llm.start(GenerationRequest(request, n=3), cancel)
    next(stream)
    stream.close()
    assert cancel.cancelled
    deadline = threading.Event()
    for _ in range(500):
        if llm.engine.stats().running == 0:
            break
        deadline.wait(0.01)
    assert llm.engine.stats().running == 0
