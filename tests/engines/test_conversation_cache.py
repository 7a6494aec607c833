"""The scheduler keeps each conversation: the next turn computes only its new tokens, other
sessions never see it, and conversations beyond the sequences come back from the prompt cache.
The simulated backend's next token depends on every token of its sequence, so any reuse of the
wrong state changes the answer and fails the comparison with a request run alone."""

from __future__ import annotations

import time

import pytest

from llmflow.engines import scheduler as scheduler_module
from llmflow.engines.base import token_request
from llmflow.engines.prompt_cache import PromptCache
from llmflow.errors import EngineFailed
from llmflow.types import CancelToken, PromptReuse
from tests.engines.test_scheduler import EOS, alone, make, params, prompt, settle, submit


def ask(scheduler, tokens, max_tokens=4, opening=()):
    """One request's tokens and how many of its prompt tokens it reused (`opening`: its
    conversation's next-turn opening)."""
    reuse = PromptReuse()
    request = token_request(
        tokens, params(max_tokens), CancelToken(), scheduler.n_ctx, reuse=reuse, next_turn_opening=opening
    )
    out = list(scheduler.generate(request))
    settle(scheduler)
    return out, reuse.cached_tokens


@pytest.fixture
def scheduler():
    _, sched = make(parallel=2)
    yield sched
    sched.close()


def test_a_repeated_prompt_reuses_all_but_its_last_token(scheduler):
    p = prompt(3, 21)
    first, cached = ask(scheduler, p)
    assert cached == 0
    before = scheduler.stats().tokens_decoded_total
    second, cached = ask(scheduler, p)
    assert first == second == alone(p, 4)
    assert cached == 20
    assert scheduler.stats().tokens_decoded_total - before == 1 + 3  # the last prompt token, 3 fed back


def test_the_next_turn_computes_only_its_new_tokens(scheduler):
    """The answer's tokens stay in the sequence: a prompt that repeats them reuses them too."""
    conversation = prompt(1, 19)
    previous = 0
    for turn in range(4):
        answer, cached = ask(scheduler, conversation, max_tokens=5)
        assert answer == alone(conversation, 5)
        if turn:
            # everything the previous turn fed: its prompt and all its answer but the last token
            assert cached == previous - 1
        previous = len(conversation) + len(answer)
        conversation = [*conversation, *answer, 11 + turn, 12 + turn, 13 + turn]


def test_two_sessions_that_share_a_prefix_then_differ_each_get_their_own_answer(scheduler):
    shared = prompt(2, 30)
    a, b = [*shared, *range(1, 13)], [*shared, *range(20, 32)]
    answer_a, _ = ask(scheduler, a)
    answer_b, cached_b = ask(scheduler, b)
    assert cached_b == 30  # the shared part only, never a's own tokens or answer
    assert answer_a == alone(a, 4) and answer_b == alone(b, 4)
    again_a, cached_a = ask(scheduler, [*a, *answer_a, 9])
    assert again_a == alone([*a, *answer_a, 9], 4)
    assert cached_a >= len(a)


def test_chats_that_take_turns_each_stay_in_their_own_sequence():
    """A new chat starts in a sequence that keeps nothing, and each chat's next turn where its
    conversation is kept: no KV copy at all (between KV streams a copy is a state save and
    restore), and every answer as when run alone."""
    backend, scheduler = make(parallel=4)
    try:
        chats = [prompt(5, 27), prompt(6, 29)]
        for turn in range(3):
            for i, chat in enumerate(chats):
                answer, cached = ask(scheduler, chat)
                assert answer == alone(chat, 4)
                assert cached == (0 if turn == 0 else len(chat) - 4)  # all but the new tokens
                chats[i] = [*chat, *answer, 40 + turn, 50 + turn, 60 + turn]
        assert backend.copies == []
    finally:
        scheduler.close()


def test_a_cancelled_generation_keeps_what_it_computed(scheduler):
    p = prompt(4, 17)
    cancel = CancelToken()
    stream = submit(scheduler, p, params(50), cancel)
    partial = [next(stream), next(stream), next(stream)]
    cancel.cancel()
    list(stream)
    settle(scheduler)
    follow = [*p, *partial, 7]
    answer, cached = ask(scheduler, follow)
    assert answer == alone(follow, 4)
    assert len(p) <= cached <= len(p) + len(partial)


def test_sessions_beyond_the_sequences_come_back_from_the_prompt_cache():
    """32 conversations round robin on 4 sequences: each revisit restores its state and
    computes only its new tokens; the answers are those of cold requests."""
    cache = PromptCache(host_bytes=1 << 30, fingerprint="sim", min_tokens=8)
    _, scheduler = make(parallel=4, prompt_cache=cache)
    try:
        sessions = [prompt(100 + i, 40) for i in range(32)]
        for i, tokens in enumerate(sessions):
            answer, _ = ask(scheduler, tokens)
            sessions[i] = [*tokens, *answer, 5]
        for i, tokens in enumerate(sessions):
            answer, cached = ask(scheduler, tokens)
            assert answer == alone(tokens, 4)
            assert cached >= 0.9 * len(tokens), (i, cached, len(tokens))
        stats = scheduler.stats()
        assert stats.cache_restores_total >= 28 and stats.cache_saves_total >= 28
    finally:
        scheduler.close()


def test_a_state_the_backend_refuses_is_computed_instead():
    cache = PromptCache(host_bytes=1 << 30, fingerprint="sim", min_tokens=8)
    backend, scheduler = make(parallel=1, prompt_cache=cache)
    backend.restore = lambda seq, state: backend.kv.__setitem__(seq, []) or False
    try:
        a, b = prompt(1, 30), prompt(2, 30)
        ask(scheduler, a)
        ask(scheduler, b)  # a goes to the cache
        answer, cached = ask(scheduler, [*a, 3])
        assert answer == alone([*a, 3], 4) and cached == 0
    finally:
        scheduler.close()


def test_without_token_reuse_only_whole_chunks_are_kept():
    _, scheduler = make(parallel=2, reuse_tokens=False)
    try:
        p = prompt(5, 21)
        ask(scheduler, p)
        answer, cached = ask(scheduler, [*p, 1, 2])
        assert cached == 16 and answer == alone([*p, 1, 2], 4)
    finally:
        scheduler.close()


# -- the next turn's opening, computed while idle --

OPENING = (70, 71, 72)


def opened(scheduler, tokens: int, timeout: float = 10.0) -> None:
    """Wait until the scheduler has computed `tokens` next-turn tokens in all."""
    deadline = time.monotonic() + timeout
    while scheduler.stats().next_turn_tokens_total < tokens:
        assert time.monotonic() < deadline, scheduler.stats()
        time.sleep(0.01)


def test_an_idle_scheduler_computes_the_next_turns_opening(scheduler):
    """After a whole answer, the last sampled token and the template's opening go into the
    sequence while nothing runs: the next turn computes only its own message, and its answer
    is the one of a cold request."""
    conversation = prompt(7, 23)
    answer, _ = ask(scheduler, conversation, max_tokens=5, opening=OPENING)
    assert answer[-1] != EOS
    opened(scheduler, 1 + len(OPENING))
    follow = [*conversation, *answer, *OPENING, 5, 6, 7]
    again, cached = ask(scheduler, follow, max_tokens=5, opening=OPENING)
    assert again == alone(follow, 5)
    assert cached == len(follow) - 3


def test_an_answer_that_ends_with_its_end_token_opens_with_the_template_boundary():
    """The end-of-generation token is not the conversation's: the next prompt spells the end
    of the answer with the template's boundary, which the opening holds."""
    _, scheduler = make(parallel=2)
    try:
        conversation = next(p for i in range(2000) if (p := prompt(i, 11)) and alone(p, 40)[-1:] == [EOS])
        answer, _ = ask(scheduler, conversation, max_tokens=40, opening=OPENING)
        assert answer[-1] == EOS
        opened(scheduler, len(OPENING))
        follow = [*conversation, *answer[:-1], *OPENING, 9]
        again, cached = ask(scheduler, follow, opening=OPENING)
        assert again == alone(follow, 4) and cached == len(follow) - 1
    finally:
        scheduler.close()


def test_a_request_that_comes_at_once_finds_no_opening_pass_before_it(monkeypatch):
    monkeypatch.setattr(scheduler_module, "OPENING_WAIT_S", 30.0)
    _, scheduler = make(parallel=2)
    try:
        conversation = prompt(8, 19)
        answer, _ = ask(scheduler, conversation, max_tokens=5, opening=OPENING)
        follow = [*conversation, *answer, *OPENING, 4]
        again, cached = ask(scheduler, follow, opening=OPENING)
        assert again == alone(follow, 4) and cached == len(conversation) + len(answer) - 1
        assert scheduler.stats().next_turn_tokens_total == 0
    finally:
        scheduler.close()


def test_an_opening_the_next_prompt_does_not_take_is_dropped(scheduler):
    """A next prompt that goes elsewhere (a tool's message, an edited answer) reuses only what
    matches, and answers as a cold request."""
    conversation = prompt(9, 21)
    answer, _ = ask(scheduler, conversation, max_tokens=5, opening=OPENING)
    opened(scheduler, 1 + len(OPENING))
    follow = [*conversation, *answer, OPENING[0], 99, 98]
    again, cached = ask(scheduler, follow, opening=OPENING)
    assert again == alone(follow, 4)
    assert cached == len(conversation) + len(answer) + 1


@pytest.mark.parametrize("case", ["cancelled", "switched off", "without token reuse"])
def test_no_opening_after_a_cancelled_answer_or_with_openings_off(case):
    options = {"switched off": {"openings": False}, "without token reuse": {"reuse_tokens": False}}
    # slow passes: the consumer cancels long before the limit
    _, scheduler = make(parallel=2, delay_s=0.005, **options.get(case, {}))
    try:
        cancel = CancelToken()
        request = token_request(
            prompt(10, 17), params(200), cancel, scheduler.n_ctx, next_turn_opening=OPENING
        )
        stream = scheduler.generate(request)
        if case == "cancelled":
            next(stream)
            cancel.cancel()
            assert len(list(stream)) < 100
        else:
            list(stream)
        settle(scheduler)
        time.sleep(3 * scheduler_module.OPENING_WAIT_S)
        assert scheduler.stats().next_turn_tokens_total == 0
    finally:
        scheduler.close()


def test_an_opening_pass_that_fails_is_dropped_and_the_next_turn_computed(caplog):
    backend, scheduler = make(parallel=2)
    try:

        def fail_openings(entries):
            if not any(e.sample for e in entries):
                raise EngineFailed("simulated failure")

        backend.on_decode = fail_openings
        conversation = prompt(11, 21)
        answer, _ = ask(scheduler, conversation, max_tokens=5, opening=OPENING)
        deadline = time.monotonic() + 10
        while "computing a next-turn opening failed" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        backend.on_decode = lambda entries: None
        follow = [*conversation, *answer, *OPENING, 3]
        again, cached = ask(scheduler, follow, opening=OPENING)
        assert again == alone(follow, 4)
        assert cached == len(conversation) + len(answer) - 1  # what the answer left, no opening
        assert scheduler.stats().next_turn_tokens_total == 0
    finally:
        scheduler.close()
