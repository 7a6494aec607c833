"""System prompts from MLflow's prompt registry, in a real tracking store: a served model reads
`prompts:/NAME@ALIAS` at load, follows the alias when it moves (within the refresh interval, no
restart), names the version it used in the trace and the answer's header; a missing prompt or
alias is an error at load or a 400 naming `system_prompt`; a failed re-read keeps the last good
version."""

from __future__ import annotations

import logging
import time
import uuid

import httpx
import mlflow
import pytest

import llmflow.mlflow
from llmflow import LLM
from llmflow.errors import PromptNotFound
from llmflow.server import ServedModel
from tests.observability.conftest import only_span
from tests.server.conftest import TIMEOUT_S, running, sse_events, wait_until_idle

REFRESH_S = 0.3
FIRST = "You are Alpha. Answer in one word."
SECOND = "You are Beta, a very careful assistant. Answer every question in two short sentences."


@pytest.fixture
def prompt(store) -> str:
    """A fresh registry prompt with two versions, alias `production` on the first."""
    name = f"assistant-{uuid.uuid4().hex[:8]}"
    mlflow.genai.register_prompt(name=name, template=FIRST)
    mlflow.genai.register_prompt(name=name, template=SECOND)
    mlflow.genai.set_prompt_alias(name, alias="production", version=1)
    return name


@pytest.fixture
def llm(prompt):
    loaded = LLM.load(system_prompt=f"prompts:/{prompt}@production", prompt_refresh_s=REFRESH_S)
    yield loaded
    loaded.close()


def _http(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=TIMEOUT_S)


def _chat(http: httpx.Client, **body) -> httpx.Response:
    messages = [{"role": "user", "content": "Hi"}]
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": messages, "max_tokens": 2, **body}
    return http.post("/v1/chat/completions", json=body)


def test_a_served_alias_is_followed_when_it_moves_and_named_in_trace_and_header(llm, prompt, experiment):
    with running(ServedModel.from_llm(llm), tracing=True) as server, _http(server) as http:
        first = _chat(http)
        assert first.status_code == 200, first.text
        assert first.headers["llmflow-prompt"] == f"prompts:/{prompt}/1"

        mlflow.genai.set_prompt_alias(prompt, alias="production", version=2)
        moved_at = time.monotonic()
        while (second := _chat(http)).headers["llmflow-prompt"] != f"prompts:/{prompt}/2":
            assert time.monotonic() - moved_at < REFRESH_S + 10, "the alias move never arrived"
            time.sleep(REFRESH_S / 3)
        stream = _chat(http, stream=True)
        assert stream.headers["llmflow-prompt"] == f"prompts:/{prompt}/2"
        assert sse_events(stream.text)[-1] == "[DONE]"
        wait_until_idle(http)
    # the longer second version really is the system prompt now
    assert second.json()["usage"]["prompt_tokens"] > first.json()["usage"]["prompt_tokens"]
    spans = [only_span(t) for t in experiment.traces()]
    versions = {span.attributes["llmflow.prompt"] for span in spans}
    assert versions == {f"prompts:/{prompt}/1", f"prompts:/{prompt}/2"}


def test_a_failed_re_read_keeps_the_last_good_version(llm, prompt, caplog):
    live = llm.system_source
    mlflow.genai.delete_prompt_alias(prompt, alias="production")
    with caplog.at_level(logging.WARNING, logger="llmflow.registry_prompts"):
        live.refresh()
    assert live.current.version == 1
    assert f"prompts:/{prompt}@production" in caplog.text
    assert FIRST in llm.render("Hi")


def test_a_missing_alias_or_prompt_fails_the_load(prompt):
    for reference in (f"prompts:/{prompt}@staging", "prompts:/no-such-prompt/1", "prompts:/bad ref"):
        with pytest.raises(PromptNotFound) as caught:
            LLM.load(system_prompt=reference)
        assert caught.value.param == "system_prompt"
        assert reference in str(caught.value)


def test_a_registry_chat_template_is_read_at_load(store):
    name = f"template-{uuid.uuid4().hex[:8]}"
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}[{{ m.content }}]{% endfor %}")
    llm = LLM.load(chat_template=f"prompts:/{name}/1", engine="llama_cpp")
    try:
        assert llm.render("Hi") == "[Hi]"
    finally:
        llm.close()


def test_a_request_may_name_its_own_version_and_a_missing_one_is_a_400(llm, prompt, experiment):
    with running(ServedModel.from_llm(llm)) as server, _http(server) as http:
        params = {"max_tokens": 2, "system_prompt": f"prompts:/{prompt}/2"}
        answer = http.post("/invocations", json={"prompt": "Hi", "stream": True, **params})
        assert answer.status_code == 200, answer.text
        assert answer.headers["llmflow-prompt"] == f"prompts:/{prompt}/2"
        params["system_prompt"] = f"prompts:/{prompt}@nowhere"
        missing = http.post("/invocations", json={"prompt": "Hi", "stream": True, **params})
        assert missing.status_code == 400
        assert "system_prompt" in missing.text and "@nowhere" in missing.text
        wait_until_idle(http)


def test_a_logged_model_reads_its_registry_prompt_when_loaded(prompt, store):
    with mlflow.start_run(experiment_id=store.experiment_id):
        info = llmflow.mlflow.log_model(
            "model", system_prompt=f"prompts:/{prompt}@production", engine="llama_cpp", by_reference=True
        )
    loaded = mlflow.pyfunc.load_model(info.model_uri)
    llm = llmflow.mlflow.find_llm(loaded)
    try:
        assert FIRST in llm.render("Hi")
        mlflow.genai.set_prompt_alias(prompt, alias="production", version=2)
        llm.system_source.refresh()
        assert SECOND in llm.render("Hi")
        assert loaded.predict({"prompt": "Hi"}, params={"max_tokens": 2})
    finally:
        llm.close()


def test_a_registry_chat_template_alias_is_followed_and_a_broken_version_kept_out(store, caplog):
    """`chat_template="prompts:/NAME@ALIAS"` is kept current as a system prompt is: the served
    model renders with the alias's new version within the refresh interval; a version that is
    no template (it does not compile) is kept out, with a log line, and the last good one stays."""
    name = f"template-{uuid.uuid4().hex[:8]}"
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}[{{ m.content }}]{% endfor %}")
    longer = "{% for m in messages %}<<< the message reads: {{ m.content }} >>>{% endfor %}"
    mlflow.genai.register_prompt(name=name, template=longer)
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}{{ m.content ")
    mlflow.genai.set_prompt_alias(name, alias="production", version=1)
    reference = f"prompts:/{name}@production"
    llm = LLM.load(chat_template=reference, prompt_refresh_s=REFRESH_S, engine="llama_cpp")
    try:
        with running(ServedModel.from_llm(llm)) as server, _http(server) as http:
            first = _chat(http, model=llm.model_name, max_tokens=1)
            assert first.status_code == 200, first.text
            assert llm.render("Hi") == "[Hi]"

            mlflow.genai.set_prompt_alias(name, alias="production", version=2)
            moved_at = time.monotonic()
            while llm.render("Hi") != "<<< the message reads: Hi >>>":
                assert time.monotonic() - moved_at < REFRESH_S + 10, "the alias move never arrived"
                time.sleep(REFRESH_S / 3)
            second = _chat(http, model=llm.model_name, max_tokens=1)
            assert second.json()["usage"]["prompt_tokens"] > first.json()["usage"]["prompt_tokens"]

            live = llm.format_source
            live.close()  # the refresh below is the only one
            mlflow.genai.set_prompt_alias(name, alias="production", version=3)
            with caplog.at_level(logging.WARNING, logger="llmflow.registry_prompts"):
                live.refresh()
            assert live.current.version == 2 and f"prompts:/{name}@production" in caplog.text
            kept = _chat(http, model=llm.model_name, max_tokens=1)
            assert kept.json()["usage"]["prompt_tokens"] == second.json()["usage"]["prompt_tokens"]
    finally:
        llm.close()


def test_the_chat_template_version_is_named_in_trace_and_header(store, experiment):
    name = f"template-{uuid.uuid4().hex[:8]}"
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}[{{ m.content }}]{% endfor %}")
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}<{{ m.content }}>{% endfor %}")
    mlflow.genai.set_prompt_alias(name, alias="production", version=1)
    reference = f"prompts:/{name}@production"
    llm = LLM.load(chat_template=reference, prompt_refresh_s=REFRESH_S, engine="llama_cpp")
    try:
        with running(ServedModel.from_llm(llm), tracing=True) as server, _http(server) as http:
            first = _chat(http, model=llm.model_name, max_tokens=1)
            assert first.headers["llmflow-chat-template"] == f"prompts:/{name}/1"
            assert "llmflow-prompt" not in first.headers  # no registry system prompt
            mlflow.genai.set_prompt_alias(name, alias="production", version=2)
            moved_at = time.monotonic()
            header = "llmflow-chat-template"
            while _chat(http, model=llm.model_name, max_tokens=1).headers[header].endswith("/1"):
                assert time.monotonic() - moved_at < REFRESH_S + 10, "the alias move never arrived"
                time.sleep(REFRESH_S / 3)
            stream = _chat(http, model=llm.model_name, max_tokens=1, stream=True)
            assert stream.headers["llmflow-chat-template"] == f"prompts:/{name}/2"
            body = {"model": llm.model_name, "prompt": "Hi", "max_tokens": 1}
            raw = http.post("/v1/completions", json=body)
            assert "llmflow-chat-template" not in raw.headers  # no template rendered it
            wait_until_idle(http)
    finally:
        llm.close()
    spans = [only_span(t) for t in experiment.traces()]
    named = {span.attributes.get("llmflow.chat_template") for span in spans}
    assert named == {f"prompts:/{name}/1", f"prompts:/{name}/2", None}


def test_a_pinned_chat_template_version_is_named(store):
    name = f"template-{uuid.uuid4().hex[:8]}"
    mlflow.genai.register_prompt(name=name, template="{% for m in messages %}[{{ m.content }}]{% endfor %}")
    llm = LLM.load(chat_template=f"prompts:/{name}/1", engine="llama_cpp")
    try:
        assert llm.prepare("Hi").template.uri == f"prompts:/{name}/1"
        assert llm.prepare("Hi", raw=True).template is None
    finally:
        llm.close()
