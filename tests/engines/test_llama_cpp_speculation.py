"""Prompt-lookup speculation on the llama.cpp engines with the embedded model: the same tokens as
without it (greedy and seeded sampling), the same stops, limits, constraints, logprobs and
cancellation, in fewer passes. Every comparison is two runs on this machine, speculation off
against on; greedy text itself is never pinned (it differs between builds)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scipy.stats import chi2_contingency

from llmflow import LLM, CancelToken, FinishReason
from llmflow.constraints import Constraint

#: short chats: prompt and answer stay within llama.cpp's first 256 KV cells, where a pass of
#: several tokens computes the numbers of one token at a time with the default f16 cache
CHATS = [
    "Name three colors.",
    "Write a haiku about the sea.",
    "Tell me a story about a dragon.",
    "List five fruits, one per line.",
    "Explain photosynthesis to a child.",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox!",
    "Write the numbers from one to twenty in words.",
    "Give me a recipe for pancakes.",
    "大阪の観光名所をひとつ教えて。",
    "Copy this list: apples, pears, plums, apples, pears, plums, apples.",
]
#: raw prompts the model continues by copying: long accepted drafts
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"
TEXT = (
    "The river runs past the old mill, under the stone bridge and into the town, where children "
    "feed the ducks every morning before school and the baker opens his shop at seven. "
)


def load(engine: str, **options) -> LLM:
    """Drafting whenever a draft is found (`draft_min`), whatever the planner would find worth it
    on this machine's pass costs: what is tested is that drafts change nothing."""
    options = {"n_ctx": 1024, "prompt_cache": False, "speculative": True, **options}
    options.setdefault("draft_min", min(4, options.get("draft_max", 4)))
    if engine == "llama_cpp_batched":
        options.setdefault("parallel", 4)
    return LLM.load(engine=engine, engine_options=options)


@pytest.fixture(scope="module")
def llm(engine_name):
    loaded = load(engine_name)
    yield loaded
    loaded.close()


def counts(llm: LLM) -> tuple[int, int]:
    c = llm.engine.speculation_stats()
    return c.proposed, c.accepted


def both(llm: LLM, prompt, params: dict, **kwargs):
    """The same request with speculation off, then on."""
    off = llm.generate(prompt, {**params, "speculative": False}, **kwargs)
    on = llm.generate(prompt, {**params, "speculative": True}, **kwargs)
    return off, on


@pytest.mark.parametrize("case", range(len(CHATS)))
def test_greedy_text_is_identical_with_random_draft_lengths(engine_name, case):
    k = random.Random(case).randint(1, 12)
    llm = load(engine_name, draft_max=k, draft_ngram_min=random.Random(case).choice([1, 2, 3]))
    try:
        off, on = both(llm, CHATS[case], {"temperature": 0, "max_tokens": 96})
    finally:
        llm.close()
    assert on.text == off.text
    assert on.finish_reason is off.finish_reason
    assert on.usage.completion_tokens == off.usage.completion_tokens


def test_a_copying_answer_takes_long_drafts_and_keeps_its_text(llm):
    before = counts(llm)
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 60}, raw=True)
    proposed, accepted = (a - b for a, b in zip(counts(llm), before, strict=True))
    assert on.text == off.text
    assert accepted >= 30 and proposed >= accepted


def test_a_long_rewrite_is_identical_with_a_q8_cache(engine_name):
    """Past 256 KV cells llama.cpp's CPU attention computes one query row in another order than
    several (its split-KV path, f16 cache only): the q8_0 cache computes both alike."""
    llm = load(engine_name, kv_cache_type="q8_0")
    try:
        prompt = "Rewrite this text, changing 'river' to 'stream':\n\n" + TEXT * 4
        off, on = both(llm, prompt, {"temperature": 0, "max_tokens": 200})
    finally:
        llm.close()
    assert on.text == off.text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_sampling_gives_the_same_tokens(llm, seed):
    """Each position is sampled from its own logits with the request's sampler, one draw per token
    as without speculation: the same seed gives the same answer."""
    params = {"temperature": 0.9, "seed": seed, "max_tokens": 48, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    off, on = both(llm, COUNTING, params, raw=True)
    assert on.text == off.text


def test_sampled_output_follows_the_same_distribution(engine_name):
    """Different seeds on each side: the continuations' distribution is the same (chi-square)."""
    llm = load(engine_name, prompt_cache=True)  # many requests on one prompt: compute it once
    prompt = "red, green, blue, " * 6 + "red, green,"
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 4}
    draws = 60
    before = counts(llm)
    off = Counter(
        llm.generate(prompt, {**params, "seed": s, "speculative": False}, raw=True).text for s in range(draws)
    )
    on = Counter(
        llm.generate(prompt, {**params, "seed": 10_000 + s, "speculative": True}, raw=True).text
        for s in range(draws)
    )
    accepted = counts(llm)[1] - before[1]
    llm.close()
    assert accepted > 0, "no draft was accepted: the test measures nothing"
    common = [text for text, n in (off + on).most_common() if n >= 8]
    table = [[off[t] for t in common] + [draws - sum(off[t] for t in common)]]
    table.append([on[t] for t in common] + [draws - sum(on[t] for t in common)])
    table = [row for row in zip(*table, strict=True) if sum(row) > 0]
    assert len(table) >= 2
    assert chi2_contingency(list(zip(*table, strict=True))).pvalue > 0.001


def test_a_stop_string_inside_an_accepted_run(llm):
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 60, "stop": [" 8,"]}, raw=True)
    assert on.finish_reason is off.finish_reason is FinishReason.STOP
    assert on.text == off.text and " 8," not in on.text


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 9])
def test_max_tokens_reached_inside_a_run(llm, max_tokens):
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": max_tokens}, raw=True)
    assert on.finish_reason is off.finish_reason is FinishReason.LENGTH
    assert on.usage.completion_tokens == off.usage.completion_tokens == max_tokens
    assert on.text == off.text


def test_a_constraint_that_refuses_part_of_a_proposal(llm):
    """The lookup proposes " 4, 5, 6, ..." after " 3,"; the regex allows " 4," then only 9s: the
    draft is cut where the constraint refuses it, and the text is what greedy decoding gives."""
    constraint = Constraint.regex(r" 4, 9(9, 9)*9?")
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 12}, raw=True, constraint=constraint)
    assert on.text == off.text
    assert on.text.startswith(" 4, 9")


def test_logprobs_are_the_same(llm):
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 24, "logprobs": 3}, raw=True)
    assert on.text == off.text
    assert on.logprobs == off.logprobs


def test_cancelling_inside_a_run_stops_at_that_token(llm):
    def tokens_until_cancelled(speculative: bool) -> str:
        cancel = CancelToken()
        pieces = []
        params = {"temperature": 0, "max_tokens": 60, "speculative": speculative}
        for chunk in llm.stream(COUNTING, params, raw=True, cancel=cancel):
            pieces.append(chunk.text)
            if len("".join(pieces)) >= 12:
                cancel.cancel()
        return "".join(pieces)

    assert tokens_until_cancelled(True) == tokens_until_cancelled(False)


def test_the_next_turn_reuses_a_context_that_held_rejected_drafts(engine_name):
    """A rejected draft's cells stay in the context: the next request's prefix reuse must still
    see exactly the tokens they hold."""
    cached = load(engine_name, prompt_cache=True)
    cold = load(engine_name, speculative=False)
    try:
        first = cached.generate(COUNTING, {"temperature": 0, "max_tokens": 30}, raw=True)
        follow = COUNTING + first.text + " and again: 1, 2,"
        warm_text = cached.generate(follow, {"temperature": 0, "max_tokens": 30}, raw=True).text
        cold_text = cold.generate(follow, {"temperature": 0, "max_tokens": 30}, raw=True).text
    finally:
        cached.close()
        cold.close()
    assert warm_text == cold_text


def test_each_answer_reports_its_own_draft_tokens(llm):
    """The usage of an answer counts the drafts verified for it (what its trace records): the
    engine's totals grow by exactly as much; without speculation it counts none."""
    before = counts(llm)
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 40}, raw=True)
    proposed, accepted = (a - b for a, b in zip(counts(llm), before, strict=True))
    assert off.usage.draft_tokens == off.usage.accepted_draft_tokens == 0
    assert (on.usage.draft_tokens, on.usage.accepted_draft_tokens) == (proposed, accepted)
    assert on.usage.draft_tokens >= on.usage.accepted_draft_tokens > 0
