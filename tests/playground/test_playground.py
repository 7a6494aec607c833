"""The playground page in a real headless Chromium against a real server with the embedded model."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import httpx
from playwright.sync_api import expect

from llmflow.server import ServedModel
from tests.server.conftest import TIMEOUT_S, metric, running, wait_until_idle

PHONE = {"width": 375, "height": 740}
SHORT = "8"  # max_tokens for answers whose content does not matter

# Records the length of the latest answer's text at every DOM change, to see it grow.
WATCH_ANSWER_LENGTHS = """() => {
    window.answerLengths = [];
    new MutationObserver(() => {
        const answers = document.querySelectorAll('.turn.assistant .content');
        const last = answers[answers.length - 1];
        if (last) window.answerLengths.push(last.textContent.length);
    }).observe(document.getElementById('transcript'), {childList: true, subtree: true, characterData: true});
}"""


def wait_ready(page: Any) -> None:
    expect(page.locator("#model-name")).not_to_have_text("loading…")


def send(page: Any, text: str) -> Any:
    """Type `text`, press Send, and wait until the answer has ended; returns the answer."""
    count = page.locator(".turn.assistant").count()
    page.fill("#prompt", text)
    page.click("#send")
    answer = page.locator(".turn.assistant").nth(count)
    expect(answer).to_have_attribute("aria-busy", "false")
    return answer


def stats(answer: Any) -> dict[str, str]:
    return answer.locator(".stats").evaluate("el => ({...el.dataset})")


def test_a_streamed_answer_grows_in_place(open_page, screenshot, served):
    page, log = open_page()
    wait_ready(page)
    expect(page.locator("#engine-name")).to_have_text(served.engine_name)
    page.evaluate(WATCH_ANSWER_LENGTHS)
    page.fill("#max-tokens", "24")
    page.check("#show-chunks")

    answer = send(page, "Tell me about Osaka.")

    text = answer.locator(".content").text_content()
    lengths = page.evaluate("window.answerLengths")
    intermediate = sorted({n for n in lengths if 0 < n < len(text)})
    assert len(intermediate) >= 2, lengths  # seen while it streamed, not only at the end
    chunks = answer.locator(".chunk").all_text_contents()
    assert "".join(chunks) == text and len(chunks) >= 3
    numbers = stats(answer)
    assert float(numbers["ttftMs"]) > 0 and float(numbers["tokensPerS"]) > 0
    assert 1 <= int(numbers["tokens"]) <= 24 and numbers["finish"] in ("stop", "length")
    expect(answer.locator(".stats")).to_contain_text("tok/s")
    (body,) = log.chat_requests()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "Tell me about Osaka."}]
    assert body["max_tokens"] == 24
    screenshot(page, "playground-answer")


def test_stop_cancels_the_generation_on_the_server(open_page, http):
    before = wait_until_idle(http)
    page, _ = open_page()
    wait_ready(page)
    page.fill("#max-tokens", "2000")
    page.fill("#temperature", "0")  # greedy: about 120 tokens, so the answer is still going at Stop
    page.fill("#prompt", "Count from 1 to 1000, one number per line.")
    page.keyboard.press("Tab")  # leave the prompt; the Send button sends
    page.click("#send")
    answer = page.locator(".turn.assistant").last
    expect(answer.locator(".chunk").nth(2)).to_be_attached()  # mid-answer
    page.click("#stop-button")

    expect(answer).to_have_attribute("aria-busy", "false")
    assert stats(answer)["finish"] == "stopped"
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop-button")).to_be_disabled()
    after = wait_until_idle(http)
    assert metric(after, "llmflow_requests_finished_total", outcome="cancelled") == (
        metric(before, "llmflow_requests_finished_total", outcome="cancelled") + 1
    )
    generated = metric(after, "llmflow_generation_tokens_total") - metric(
        before, "llmflow_generation_tokens_total"
    )
    assert 3 <= generated < 2000


def test_params_are_sent_and_the_conversation_has_turns(open_page):
    page, log = open_page()
    wait_ready(page)
    page.fill("#system-prompt", "You answer in one sentence.")
    page.fill("#temperature", "0.7")
    page.fill("#top-p", "0.9")
    page.fill("#top-k", "20")
    page.fill("#max-tokens", SHORT)
    page.fill("#seed", "42")
    page.fill("#stop", "\\n\\n\nEND")

    first = send(page, "Hi there")
    # Shift+Enter is a newline, Enter sends
    page.click("#prompt")
    page.keyboard.type("Line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    page.keyboard.press("Enter")
    second = page.locator(".turn.assistant").nth(1)
    expect(second).to_have_attribute("aria-busy", "false")

    bodies = log.chat_requests()
    assert len(bodies) == 2
    for body in bodies:
        assert {k: body[k] for k in ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop")} == {
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 20,
            "max_tokens": 8,
            "seed": 42,
            "stop": ["\n\n", "END"],
        }
    system = {"role": "system", "content": "You answer in one sentence."}
    assert bodies[0]["messages"] == [system, {"role": "user", "content": "Hi there"}]
    assert bodies[1]["messages"] == [
        system,
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": first.locator(".content").text_content()},
        {"role": "user", "content": "Line one\nline two"},
    ]
    assert int(stats(second)["tokens"]) <= 8

    # the params are kept for the next visit (the key never is: see the API key test)
    page.reload()
    wait_ready(page)
    expect(page.locator("#top-k")).to_have_value("20")
    expect(page.locator("#stop")).to_have_value("\\n\\n\nEND")
    page.click("#reset-params")
    expect(page.locator("#top-k")).to_have_value("")


def test_the_page_asks_for_the_api_key_and_keeps_it_in_the_tab(open_page, start_server):
    with start_server(api_key="open-sesame") as server:
        page, log = open_page(server.url)
        dialog = page.locator("#key-dialog")
        expect(dialog).to_be_visible()  # /v1/models answered 401
        expect(page.locator("#key-reason")).to_have_text("This server needs an API key.")
        page.fill("#api-key", "wrong")
        page.click("#key-ok")
        expect(page.locator("#key-reason")).to_contain_text("rejected")
        page.fill("#api-key", "open-sesame")
        page.keyboard.press("Enter")
        expect(dialog).to_be_hidden()
        wait_ready(page)

        # a key that goes missing mid-conversation: 401, the dialog, and the message is re-sent
        page.evaluate("sessionStorage.clear()")
        page.fill("#max-tokens", SHORT)
        page.fill("#prompt", "Hello")
        page.click("#send")
        expect(dialog).to_be_visible()
        page.fill("#api-key", "open-sesame")
        page.click("#key-ok")
        answer = page.locator(".turn.assistant").last
        expect(answer).to_have_attribute("aria-busy", "false")
        expect(answer.locator(".error")).to_have_count(0)
        expect(page.locator(".turn.user")).to_have_count(1)
        assert int(stats(answer)["tokens"]) >= 1

        storage = page.evaluate("({session: {...sessionStorage}, local: JSON.stringify({...localStorage})})")
        assert storage["session"] == {"llmflow.apiKey": "open-sesame"}
        assert "open-sesame" not in storage["local"]
        chat = [r for r in log.requests if r.url.endswith("/chat/completions")]
        assert [r.headers.get("authorization") for r in chat] == [None, "Bearer open-sesame"]
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
            client.headers["Authorization"] = "Bearer open-sesame"
            wait_until_idle(client)


def test_a_prompt_longer_than_the_context_is_a_clear_error(open_page, screenshot):
    page, log = open_page()
    wait_ready(page)
    page.fill("#max-tokens", SHORT)
    long_prompt = "word " * 6000  # more tokens than the 4096-token context

    answer = send(page, long_prompt)

    error = answer.locator(".error")
    expect(error).to_have_attribute("role", "alert")
    expect(error).to_have_attribute("data-code", "context_length_exceeded")
    expect(error).to_contain_text("Too long for the model's context window")
    expect(page.locator(".turn.user").last).to_have_class("turn user failed")
    expect(page.locator("#prompt")).to_have_value(long_prompt)  # given back to shorten
    screenshot(page, "playground-context-error")

    send(page, "Hi")  # the failed exchange is not part of the conversation
    assert log.chat_requests()[-1]["messages"] == [{"role": "user", "content": "Hi"}]


def test_a_busy_server_is_a_clear_error(open_page, start_server, screenshot):
    with (
        start_server(max_running=1, max_queue=0) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client,
    ):
        page, _ = open_page(server.url)
        wait_ready(page)
        model = page.locator("#model-name").text_content()
        holding = threading.Event()
        release = threading.Event()

        def hold_the_only_place() -> None:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": "Count to 1000."}],
                "max_tokens": 2000,
                "stream": True,
            }
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                for _ in response.iter_lines():
                    holding.set()
                    if release.is_set():
                        return

        holder = threading.Thread(target=hold_the_only_place)
        holder.start()
        try:
            assert holding.wait(TIMEOUT_S)
            answer = send(page, "Hello")
            error = answer.locator(".error")
            expect(error).to_have_attribute("data-status", "429")
            expect(error).to_contain_text("The server is busy")
            expect(error).to_contain_text("Try again in 1 s")
            screenshot(page, "playground-busy")
        finally:
            release.set()
            holder.join(TIMEOUT_S)
        wait_until_idle(client)


def test_phone_width_has_no_horizontal_scroll(open_page, screenshot):
    page, _ = open_page(viewport=PHONE)
    wait_ready(page)
    expect(page.locator("#params")).not_to_have_attribute("open", "")  # folded on a phone
    page.click("#params summary")
    page.fill("#max-tokens", SHORT)
    page.click("#params summary")
    send(page, "Spell this: " + "x" * 300)  # one long word must wrap, not widen the page

    widths = page.evaluate(
        """[document.documentElement.scrollWidth, document.documentElement.clientWidth,
            document.getElementById('transcript').scrollWidth,
            document.getElementById('transcript').clientWidth]"""
    )
    assert widths[0] <= widths[1] == PHONE["width"] and widths[2] <= widths[3], widths
    send_box = page.locator("#send").bounding_box()
    assert send_box["x"] + send_box["width"] <= PHONE["width"]
    assert send_box["y"] + send_box["height"] <= PHONE["height"]  # the composer stays on screen
    screenshot(page, "playground-phone")
    page.click("#params summary")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "playground-phone-params")


def test_controls_are_labelled_and_the_answer_region_is_live(open_page):
    page, _ = open_page()
    wait_ready(page)
    unlabelled = page.evaluate(
        """[...document.querySelectorAll('input, textarea, select')]
            .filter(el => el.labels.length === 0 && !el.getAttribute('aria-label')).map(el => el.id)"""
    )
    assert unlabelled == []
    nameless = page.evaluate(
        "[...document.querySelectorAll('button')].filter(b => !b.textContent.trim()).length"
    )
    assert nameless == 0
    transcript = page.locator("#transcript")
    expect(transcript).to_have_attribute("aria-live", "polite")
    expect(transcript).to_have_attribute("role", "log")
    expect(page.locator("html")).to_have_attribute("lang", "en")


def test_a_model_without_chat_says_so(open_page):
    """A plain MLflow pyfunc model has no chat route: the page says where it is served instead."""
    with running(ServedModel("plain")) as server:
        page, _ = open_page(server.url)
        expect(page.locator("#model-name")).to_have_text("plain")
        expect(page.locator("#notice")).to_contain_text("POST /invocations")
        expect(page.locator("#send")).to_be_disabled()


def test_a_model_picker_when_the_server_serves_several(open_page, served):
    """The picker lists GET /v1/models; requests and each answer's label follow the pick, which
    the page remembers. One model: no picker."""
    page, _ = open_page()
    wait_ready(page)
    expect(page.locator("#model-picker")).to_be_hidden()
    expect(page.locator("#model-name")).to_be_visible()

    other = dataclasses.replace(served, name="other")  # the same LLM under a second name
    with running([served, other]) as server:
        page, log = open_page(server.url)
        wait_ready(page)
        picker = page.locator("#model-select")
        expect(picker).to_be_visible()
        expect(page.locator("#model-name")).to_be_hidden()
        assert picker.locator("option").all_text_contents() == [served.name, "other"]
        expect(picker).to_have_value(served.name)  # the server's default
        expect(page.get_by_label("Model to chat with")).to_be_visible()
        page.fill("#max-tokens", SHORT)
        first = send(page, "Hi")

        picker.select_option("other")
        expect(page.locator("#engine-name")).to_have_text("")  # only the default's engine is known
        second = send(page, "Hello")

        assert [body["model"] for body in log.chat_requests()] == [served.name, "other"]
        expect(first.locator(".who")).to_have_text(served.name)
        expect(second.locator(".who")).to_have_text("other")
        expect(second.locator(".error")).to_have_count(0)

        page.reload()
        wait_ready(page)
        expect(page.locator("#model-select")).to_have_value("other")  # remembered
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
            wait_until_idle(client)
