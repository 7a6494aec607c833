"""The one-at-a-time llama.cpp engine computes an answer's next-turn opening once idle, as the
batching engine does (tests/engines/test_batched_reuse.py): the conversation's next prompt then
computes only its new message. Token ids throughout, so that it holds whatever the model answers."""

from __future__ import annotations

import logging
import time

import pytest

from llmflow import LLM
from llmflow.engines import idle as idle_module
from llmflow.errors import EngineFailed
from llmflow.types import CancelToken, PromptReuse

CHAT = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Sky?"}]
GREEDY = {"max_tokens": 6, "temperature": 0.0}


@pytest.fixture(scope="module")
def llm():
    llm = LLM.load(engine="llama_cpp", engine_options={"n_ctx": 1024})
    yield llm
    llm.close()


def opened_after_idle(engine, before: int) -> int:
    """The tokens opened since `before`, once the idle wait and its pass are over."""
    deadline = time.monotonic() + 30
    while engine.next_turn_tokens_total == before and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(2 * idle_module.OPENING_WAIT_S)  # nothing more comes
    return engine.next_turn_tokens_total - before


def first_turn(llm):
    """A fresh conversation's first turn (its own system prompt, so no earlier test's state
    matches); its request and the answer's tokens as the conversation keeps them."""
    engine = llm.engine
    chat = [{**CHAT[0], "content": f"You answer in one word. ({time.monotonic_ns()})"}, CHAT[1]]
    first = llm.prepare(chat, GREEDY)
    assert first.next_turn_opening
    answer = list(
        engine.generate(first.prompt_ids, first.params, CancelToken(), None, None, first.next_turn_opening)
    )
    said = answer[:-1] if answer[-1] in engine.eos_token_ids else answer
    return first, answer, said


def next_turn(llm, first, said) -> int:
    """The conversation's next prompt; how many of its tokens the engine reused."""
    engine = llm.engine
    new = engine.tokenize("And grass?<|im_end|>\n<|im_start|>assistant\n", add_special=False)
    follow = [*first.prompt_ids, *said, *first.next_turn_opening, *new]
    reuse = PromptReuse()
    assert list(engine.generate(follow, first.params, CancelToken(), None, reuse))
    return reuse.cached_tokens


def kept_without_opening(first, said) -> range:
    """What the next turn reuses when nothing after the answer was computed: the prompt and the
    answer's computed tokens (all but the last, when it ran to its limit)."""
    return range(len(first.prompt_ids) + len(said) - 1, len(first.prompt_ids) + len(said) + 1)


def test_the_opening_is_computed_while_idle_and_reused(llm):
    engine = llm.engine
    before = engine.next_turn_tokens_total
    first, answer, said = first_turn(llm)
    # the opening, after the answer's last token when it ran to its limit (an end token is not
    # the conversation's)
    assert opened_after_idle(engine, before) == len(first.next_turn_opening) + (len(said) == len(answer))
    cached = next_turn(llm, first, said)
    assert cached == len(first.prompt_ids) + len(said) + len(first.next_turn_opening)


def test_a_request_before_the_idle_wait_ends_finds_the_engine_free(llm, monkeypatch):
    monkeypatch.setattr(idle_module, "OPENING_WAIT_S", 30.0)
    engine = llm.engine
    before = engine.next_turn_tokens_total
    first, _, said = first_turn(llm)
    started = time.monotonic()
    cached = next_turn(llm, first, said)
    assert time.monotonic() - started < 10  # it did not wait for the pending opening
    assert engine.next_turn_tokens_total == before
    assert cached in kept_without_opening(first, said)


def test_an_opening_that_fails_is_logged_and_dropped(llm, monkeypatch, caplog):
    engine = llm.engine
    steps = engine._steps
    feed = steps.feed

    def failing(tokens, rows):
        if rows == 0:  # only the opening's pass asks for no logits
            raise EngineFailed("no room")
        return feed(tokens, rows)

    monkeypatch.setattr(steps, "feed", failing)
    before = engine.next_turn_tokens_total
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.llama_cpp"):
        first, _, said = first_turn(llm)
        deadline = time.monotonic() + 30
        while "computing a next-turn opening failed" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    monkeypatch.setattr(steps, "feed", feed)
    assert engine.next_turn_tokens_total == before
    cached = next_turn(llm, first, said)
    assert cached in kept_without_opening(first, said)


def test_off_computes_no_opening():
    llm = LLM.load(engine="llama_cpp", engine_options={"n_ctx": 1024, "next_turn_opening": False})
    try:
        first_turn(llm)
        time.sleep(5 * idle_module.OPENING_WAIT_S)
        assert llm.engine.next_turn_tokens_total == 0
    finally:
        llm.close()
