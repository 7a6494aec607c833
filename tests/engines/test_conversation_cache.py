"""The scheduler keeps each conversation: the next turn computes only its new tokens, other
sessions never see it, and conversations beyond the sequences come back from the prompt cache.
The simulated backend's next token depends on every token of its sequence, so any reuse of the
wrong state changes the answer and fails the comparison with a request run alone."""

from __future__ import annotations

import pytest

from llmflow.engines.base import token_request
from llmflow.engines.prompt_cache import PromptCache
from llmflow.types import CancelToken, PromptReuse
from tests.engines.test_scheduler import alone, make, params, prompt, settle, submit


def ask(scheduler, tokens, max_tokens=4):
    """One request's tokens and how many of its prompt tokens it reused."""
    reuse = PromptReuse()
    request = token_request(tokens, params(max_tokens), CancelToken(), scheduler.n_ctx, reuse=reuse)
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
