"""Concurrent sessions that come back to the batching engine (a KV stream per sequence, the
conversation cache on) reuse their own conversations. llama.cpp copies between streams only at
the next pass; a copy still queued while a sequence's state was saved or restored once gave
requests other sessions' KV, which moved their first token's logprob by 1.7 to 2.1 nats. Reusing
one's own conversation moves it only as far as computing in other splits does (about 0.1 here;
see docs/conversation-cache.md), so the bound below tells the two apart."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from llmflow import LLM

TOPICS = ["rivers", "bridges", "bakeries", "markets", "churches", "farms"]
PARAMS = {"temperature": 0.0, "max_tokens": 6, "logprobs": 1}
#: how far reuse may move a first token's logprob (nats): far below what another session's KV does
REUSE_TOLERANCE = 0.5


def prompt(topic: str) -> str:
    text = " ".join(f"Sentence {i} is about {topic} and nothing else." for i in range(30))
    return f"Repeat the first sentence of this text about {topic}.\n\n{text}"


def test_returning_sessions_get_their_own_conversations_back():
    llm = LLM.load(
        engine="llama_cpp_batched",
        engine_options={"n_ctx": 1024, "parallel": len(TOPICS), "kv_unified": False},
    )
    try:
        with ThreadPoolExecutor(len(TOPICS)) as pool:

            def round_() -> list:
                return list(pool.map(lambda t: llm.generate(prompt(t), PARAMS), TOPICS))

            cold = [a.logprobs[0].logprob for a in round_()]
            for _ in range(6):  # each request reuses its conversation of the round before
                again = round_()
                assert all(a.usage.cached_tokens > 0 for a in again)
                moved = [abs(a.logprobs[0].logprob - c) for a, c in zip(again, cold, strict=True)]
                assert max(moved) < REUSE_TOLERANCE, moved
    finally:
        llm.close()


def test_the_next_turn_opening_is_computed_while_idle_and_reused(default_served):
    """The batching engine computes an answer's last token and the template's boundary once
    idle: the conversation's next prompt reuses all of them and computes only its new message.
    Token ids throughout, so that it holds whatever the model answers."""
    import time

    from llmflow.types import CancelToken, PromptReuse

    llm = default_served.llm
    engine = llm.engine
    chat = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Sky?"}]
    first = llm.prepare(chat, {"max_tokens": 6, "temperature": 0.0})
    boundary = "<|im_end|>\n<|im_start|>user\n"
    assert first.next_turn_opening == tuple(engine.tokenize(boundary, add_special=False))
    assert llm.prepare("Sky?", raw=True).next_turn_opening == ()

    def settled() -> int:
        """The opened-token count once no opening is left to compute (earlier tests' too)."""
        deadline, last, since = time.monotonic() + 30, -1, time.monotonic()
        while True:
            now = engine.stats().next_turn_tokens_total
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 1.0:
                return now
            assert time.monotonic() < deadline, engine.stats()
            time.sleep(0.02)

    before = settled()
    answer = list(
        engine.generate(first.prompt_ids, first.params, CancelToken(), None, None, first.next_turn_opening)
    )
    said = answer[:-1] if answer[-1] in engine.eos_token_ids else answer
    # the opening, after the answer's last token when it ran to its limit (an end token is not
    # the conversation's)
    assert settled() - before == len(first.next_turn_opening) + (len(said) == len(answer))

    new = engine.tokenize("And grass?<|im_end|>\n<|im_start|>assistant\n", add_special=False)
    follow = [*first.prompt_ids, *said, *first.next_turn_opening, *new]
    reuse = PromptReuse()
    assert list(engine.generate(follow, first.params, CancelToken(), None, reuse))
    assert reuse.cached_tokens == len(follow) - len(new)
