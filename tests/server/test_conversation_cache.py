"""A chat session over HTTP keeps its conversation in the engine: each turn reports the prompt
tokens it reused (`cached_tokens`) on every surface, and /metrics counts reused and computed
prompt tokens. Holds for any answer the model gives: only counts are checked."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from typing import Any

import httpx
from openai import OpenAI

from llmflow import LLM
from llmflow.server import ServedModel
from tests.bench.servers import free_port
from tests.server.conftest import TIMEOUT_S, metric, running, wait_healthy

SYSTEM = "You are a terse assistant for a shop that sells paint. " * 12


def chat_turns(client, model_name, turns=3):
    """A session of `turns`, each answer appended; the usage of each turn."""
    messages = [{"role": "system", "content": SYSTEM}]
    usages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: which color is calm?"})
        answer = client.chat.completions.create(
            model=model_name, messages=messages, max_tokens=8, temperature=0.0
        )
        usages.append(answer.usage)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    return usages


def test_each_turn_reuses_the_conversation_so_far(client, model_name):
    usages = chat_turns(client, model_name)
    for before, usage in itertools.pairwise(usages):
        cached = usage.prompt_tokens_details.cached_tokens
        # all of the previous turn's prompt, at least, and never the whole new prompt
        assert before.prompt_tokens <= cached < usage.prompt_tokens


def test_a_streamed_turn_reports_its_cached_tokens(client, model_name):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    client.chat.completions.create(model=model_name, messages=messages, max_tokens=2)
    stream = client.chat.completions.create(
        model=model_name,
        messages=messages,
        max_tokens=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_completions_and_responses_report_cached_tokens(client, model_name):
    prompt = SYSTEM + "Name a calm color:"
    client.completions.create(model=model_name, prompt=prompt, max_tokens=2)
    again = client.completions.create(model=model_name, prompt=prompt, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    client.responses.create(model=model_name, instructions=SYSTEM, input="Hi", max_output_tokens=16)
    response = client.responses.create(
        model=model_name, instructions=SYSTEM, input="Hi", max_output_tokens=16
    )
    details = response.usage.input_tokens_details
    assert details.cached_tokens == response.usage.input_tokens - 1


def test_invocations_stream_reports_cached_tokens(server):
    body = {"prompt": SYSTEM + "A calm color:", "params": {"max_tokens": 2}, "stream": True}
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        http.post("/invocations", json={**body, "stream": False})
        raw = http.post("/invocations", json=body).text
    events = [json.loads(line.removeprefix("data: ")) for line in raw.splitlines() if '"usage"' in line]
    usage = events[-1]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1


def test_metrics_count_reused_and_computed_prompt_tokens(client, model_name, server):
    def counter(text, name):
        lines = [line for line in text.splitlines() if line.startswith(name + "{")]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        before = http.get("/metrics").text
        usages = chat_turns(client, model_name, turns=2)
        after = http.get("/metrics").text
    reused = counter(after, "llmflow_prompt_tokens_cached_total") - counter(
        before, "llmflow_prompt_tokens_cached_total"
    )
    computed = counter(after, "llmflow_prompt_tokens_computed_total") - counter(
        before, "llmflow_prompt_tokens_computed_total"
    )
    assert reused == sum(u.prompt_tokens_details.cached_tokens for u in usages)
    assert reused + computed == sum(u.prompt_tokens for u in usages)
    assert "llmflow_prompt_cache_bytes{" in after


def test_metrics_count_the_tokens_computed_while_idle_for_the_next_turn(client, model_name, server):
    """Either engine computes an answer's next-turn opening once idle, counted in /metrics."""
    name = "llmflow_engine_next_turn_tokens"
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        before = metric(http.get("/metrics").text, name, model=model_name)
        chat_turns(client, model_name, turns=1)
        deadline = time.monotonic() + 30
        while (after := metric(http.get("/metrics").text, name, model=model_name)) == before:
            assert time.monotonic() < deadline, f"{name} stayed at {before}"
            time.sleep(0.05)
    assert after > before


def test_a_restarted_server_finds_the_conversation_in_its_cache_directory(tmp_path):
    """At shutdown the server saves what its engine keeps to the disk tier; a new server on the
    same directory answers the conversation's next turn from it."""
    options = {"n_ctx": 1024, "parallel": 2, "prompt_cache_dir": str(tmp_path)}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]

    def one_turn():
        llm = LLM.load(engine="llama_cpp_batched", engine_options=options)
        try:
            served = ServedModel.from_llm(llm)
            with running(served) as server:
                client = OpenAI(
                    base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S
                )
                answer = client.chat.completions.create(model=served.name, messages=messages, max_tokens=4)
            return answer
        finally:
            llm.close()

    first = one_turn()
    assert list(tmp_path.glob("*.kv"))
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Bye"},
    ]
    again = one_turn()
    assert again.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


def test_llmflow_serve_saves_a_streamed_conversation_when_it_stops(tmp_path):
    """`llmflow serve` stopped by SIGTERM saves what its batching engine keeps to the disk tier,
    though its streams were read on the event loop with no worker thread (shutdown once returned
    before saving when no worker had ever run); a new server answers the next turn from it."""
    model = "SmolLM2-135M-Instruct.Q4_1"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]

    def one_turn() -> tuple[str, Any]:
        port = free_port()
        command = [sys.executable, "-m", "llmflow", "serve", "--port", str(port),
                   "--engine", "llama_cpp_batched", "--engine-option", "n_ctx=1024", "--parallel", "2",
                   "--engine-option", f"prompt_cache_dir={tmp_path}", "--log-level", "warning"]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(process, url)
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
            stream = client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
        finally:
            process.terminate()
            process.wait(60)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage

    text, first = one_turn()
    assert list(tmp_path.glob("*.kv"))
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Bye"}]
    _, again = one_turn()
    assert again.prompt_tokens_details.cached_tokens >= first.prompt_tokens
