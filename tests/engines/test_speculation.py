"""Prompt lookup and the draft rules (no model): what `PromptLookup` proposes, how much of a draft
the model's picks confirm, how likely a draft token is to be confirmed, what a pass costs, and
how long each draft is planned."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow.engines.speculation import (
    GAIN_MARGIN,
    STALE_PASSES,
    UNLIKELY,
    Acceptance,
    Acceptances,
    Drafts,
    PassCost,
    PromptLookup,
    Shadow,
    Speculation,
    Want,
    accepted_prefix,
    plan_equal_length,
    plan_lengths,
)

tokens = st.lists(st.integers(0, 6), max_size=80)


def reference_proposal(history: list[int], k: int, low: int, high: int) -> list[int]:
    """The definition, by brute force: the longest suffix n-gram (high..low) that occurred earlier
    with a token after it; continue from its latest such occurrence."""
    for n in range(high, low - 1, -1):
        if n > len(history):
            continue
        suffix = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start : start + n] == suffix:
                return history[start + n : start + n + k]
    return []


@settings(max_examples=300, deadline=None)
@given(history=tokens, k=st.integers(0, 10), low=st.integers(1, 3), extra=st.integers(0, 3))
def test_proposal_is_the_continuation_of_the_latest_earlier_ngram(history, k, low, extra):
    high = low + extra
    lookup = PromptLookup(history, ngram_min=low, ngram_max=high)
    assert lookup.propose(k) == reference_proposal(history, k, low, high)


@settings(max_examples=200, deadline=None)
@given(prompt=tokens, answer=tokens, k=st.integers(1, 8))
def test_appending_one_by_one_equals_building_at_once(prompt, answer, k):
    grown = PromptLookup(prompt)
    for token in answer:
        grown.append(token)
    assert grown.propose(k) == PromptLookup(prompt + answer).propose(k)
    assert len(grown) == len(prompt) + len(answer)


@settings(max_examples=200, deadline=None)
@given(history=tokens, k=st.integers(1, 10))
def test_a_proposal_is_at_most_k_tokens_of_the_history(history, k):
    proposal = PromptLookup(history).propose(k)
    assert len(proposal) <= k
    text = ",".join(map(str, history)) + ","
    assert not proposal or ",".join(map(str, proposal)) + "," in text


def test_copying_a_text_proposes_what_follows_in_it():
    text = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    lookup = PromptLookup([1, 2, *text, 3, 4, 10, 11, 12])
    assert lookup.propose(4) == [13, 14, 15, 16]
    assert lookup.propose(100) == [13, 14, 15, 16, 17, 18, 19, 3, 4, 10, 11, 12]


def test_the_longest_ngram_wins_over_a_later_shorter_one():
    # "8 9" occurs last before [5], but "7 8 9" occurs before [1]: the longer context is the better guess
    lookup = PromptLookup([7, 8, 9, 1, 2, 0, 8, 9, 5, 0, 7, 8, 9], ngram_min=2, ngram_max=3)
    assert lookup.propose(2) == [1, 2]


def test_nothing_to_propose():
    assert PromptLookup([]).propose(4) == []
    assert PromptLookup([1, 2, 3, 4]).propose(4) == []
    assert PromptLookup([1, 2, 1, 2]).propose(0) == []


@pytest.mark.parametrize(
    ("draft", "picks", "accepted"),
    [([], [5], 0), ([1, 2, 3], [1, 2, 3, 4], 3), ([1, 2, 3], [1, 9, 3, 4], 1), ([1], [2, 3], 0)],
)
def test_accepted_prefix(draft, picks, accepted):
    assert accepted_prefix(draft, picks) == accepted


def test_acceptance_rises_on_confirmed_drafts_falls_on_rejections_and_fades_back():
    acceptance = Acceptance()
    prior = acceptance.rate
    assert 0 < prior < 1
    for _ in range(5):
        acceptance.fade()
        acceptance.add(8, 8)
    assert acceptance.rate > 0.95
    for _ in range(8):
        acceptance.fade()
        acceptance.add(4, 0)
    assert acceptance.rate < prior
    for _ in range(1000):  # passes without a draft: back to the prior, so drafts are tried again
        acceptance.fade()
    assert acceptance.rate == pytest.approx(prior, abs=1e-6)


def test_a_shadow_counts_as_the_trials_its_verification_would_have_been():
    shadowed, shadow = Acceptance(), Shadow()
    shadow.hold([1, 2, 3, 4], shadowed)
    for token in (1, 2, 9, 4):  # two agree, then one differs: the rest is never compared
        shadow.see(token)
    assert not shadow.active
    verified = Acceptance()
    for confirmed in (1, 1, 0):  # the same three tokens, each verified in a pass of its own
        verified.add(1, confirmed)
    assert (shadowed.confirmed, shadowed.rejected) == (verified.confirmed, verified.rejected)


#: a pass of one token costs 1, each further token 0.6: a draft at the prior acceptance rate does
#: not pay (`GAIN_MARGIN`), one at the rate of an answer that copies its prompt does
FIXED_HEAVY = [(1, 1.0), (16, 10.0)]
TEXT = list(range(100, 140))


def copying(answered: int) -> list[int]:
    """A prompt holding `TEXT`, then an answer that has copied its first `answered` tokens."""
    return [*TEXT, 1, *TEXT[:answered]]


def test_a_declined_proposal_is_learned_from_so_an_answer_that_copies_comes_to_draft():
    drafts = Drafts(Speculation(draft_max=8))
    for width, seconds in FIXED_HEAVY:
        drafts.cost.observe(width, seconds)
    made = drafts.propose([Want("a", 0, copying(3), 50)], decoding=1, room=40)
    assert made == {}  # the prior alone does not pay: the proposal is held in the shadow
    answered = 4  # one token per pass, each the proposal's next
    while not (made := drafts.propose([Want("a", 0, copying(answered), 50)], decoding=1, room=40)):
        answered += 1
        assert answered < 8, "the answer copies: it should have come to draft"
    assert made["a"] == TEXT[answered : answered + len(made["a"])]


def test_an_answer_that_leaves_its_proposals_never_drafts():
    drafts = Drafts(Speculation(draft_max=8))
    for width, seconds in FIXED_HEAVY:
        drafts.cost.observe(width, seconds)
    tokens = copying(3)
    for turn in range(30):  # each proposal's first token differs from the one the answer takes
        assert drafts.propose([Want("a", 0, tokens, 50)], decoding=1, room=40) == {}
        tokens = [*tokens, 1000 + turn, *TEXT[:3]]
    assert drafts.propose([Want("a", 0, tokens, 50)], decoding=1, room=40) == {}


def test_the_one_at_a_time_loop_learns_from_declined_proposals_too():
    from llmflow.engines.llama_cpp_loop import _Drafting

    cost = PassCost()
    for width, seconds in FIXED_HEAVY:
        cost.observe(width, seconds)
    drafting = _Drafting(PromptLookup(copying(3)), Speculation(draft_max=8), cost, free=True)
    assert drafting.next(None, room=64, left=64) == []  # the prior alone does not pay
    answered = 3
    while not (draft := drafting.next(None, room=64, left=64)):
        drafting.take(TEXT[answered])  # the answer copies the text, one token per pass
        answered += 1
        assert answered < 8, "the answer copies: it should have come to draft"
    assert draft == TEXT[answered : answered + len(draft)]


def test_a_proposal_that_picks_up_a_copy_in_progress_continues_it():
    lookup = PromptLookup(copying(3))
    assert lookup.propose(4) == TEXT[3:7]
    assert not lookup.continues  # no proposal before it
    lookup.extend(TEXT[3:5])  # the answer took what the proposal said
    assert lookup.propose(4) == TEXT[5:9]
    assert lookup.continues
    lookup.extend([TEXT[5], 999, *TEXT[20:22]])  # it left the text, then matched it elsewhere
    assert lookup.propose(4) == TEXT[22:26]
    assert not lookup.continues
    lookup.append(TEXT[22])
    assert lookup.propose(4) == TEXT[23:27]
    assert lookup.continues


def test_drafts_that_continue_a_copy_learn_their_acceptance_apart_from_fresh_ones():
    acceptances = Acceptances()
    assert acceptances.of(True).rate > acceptances.of(False).rate
    for _ in range(6):
        acceptances.fade()
        acceptances.of(False).add(4, 0)
    assert acceptances.of(False).rate < 0.5 < 0.9 <= acceptances.of(True).rate


def test_the_loop_drafts_inside_a_copy_after_fresh_matches_failed():
    from llmflow.engines.llama_cpp_loop import _Drafting

    cost = PassCost()
    for width, seconds in FIXED_HEAVY:
        cost.observe(width, seconds)
    drafting = _Drafting(PromptLookup(copying(3)), Speculation(draft_max=8), cost, free=True)
    for _ in range(10):  # fresh matches kept failing
        drafting.acceptances.fresh.add(4, 0)
    assert drafting.next(None, room=64, left=64) == []  # a fresh match: declined
    drafting.take(TEXT[3])  # the answer takes what it proposed: a copy in progress
    draft = drafting.next(None, room=64, left=64)
    assert len(draft) >= 2
    assert draft == TEXT[4 : 4 + len(draft)]
    assert drafting.current is drafting.acceptances.copying


def test_the_batching_drafts_draft_inside_a_copy_after_fresh_matches_failed():
    drafts = Drafts(Speculation(draft_max=8))
    for width, seconds in FIXED_HEAVY:
        drafts.cost.observe(width, seconds)
    assert drafts.propose([Want("a", 0, copying(3), 50)], decoding=1, room=40) == {}  # a fresh match
    state = drafts._state["a"]
    for _ in range(10):  # fresh matches kept failing
        state.acceptances.fresh.add(4, 0)
    made = drafts.propose([Want("a", 0, copying(4), 50)], decoding=1, room=40)  # it took what was proposed
    assert len(made["a"]) >= 2
    assert made["a"] == TEXT[4 : 4 + len(made["a"])]
    fresh = (state.acceptances.fresh.confirmed, state.acceptances.fresh.rejected)
    assert drafts.record("a", len(made["a"]), 1) == (len(made["a"]), 1)
    assert state.acceptances.copying.rejected > 0  # judged as a copy's draft, not a fresh one's
    assert (state.acceptances.fresh.confirmed, state.acceptances.fresh.rejected) == fresh


def test_pass_cost_interpolates_what_it_saw_and_assumes_wider_passes_cheap_until_tried():
    cost = PassCost()
    assert cost.curve()(1) < cost.curve()(2) < 2 * cost.curve()(1)  # nothing seen: tried gently
    cost.observe(1, 0.010)
    cost.observe(8, 0.050)
    curve = cost.curve()
    assert curve(1) == pytest.approx(0.010)
    assert curve(8) == pytest.approx(0.050)
    assert curve(4) == pytest.approx(0.010 + 0.040 * 3 / 7)
    assert 0.050 < curve(16) < 0.050 + 8 * 0.050 / 8  # beyond: a quarter of the cost per token
    assert curve(64) == pytest.approx(curve(16) * 4)  # beyond twice the widest: in proportion
    cost.observe(16, 0.100)
    assert cost.curve()(16) == pytest.approx(0.100)


def test_untried_widths_are_tried_a_doubling_at_a_time():
    """A CPU where every token costs a one-token pass: from one-token passes alone, a copying
    answer tries a two-token pass, not a 17-token one (which would cost 17 passes at once)."""
    cost = PassCost()
    cost.observe(1, 0.013)
    assert plan_lengths(1, [(0.9, 16)], cost.curve(), 32) == [1]


def test_pass_cost_forgets_a_band_not_seen_for_long():
    cost = PassCost()
    cost.observe(16, 1.0)  # one slow pass (say, the machine was busy)
    for _ in range(STALE_PASSES):
        cost.observe(1, 0.010)
    curve = cost.curve()
    assert curve(16) < 0.2  # the slow pass forgotten: its width is guessed afresh
    assert curve(2) < 2 * curve(1)  # and tried again, wider step by step, rather than avoided for ever


def test_pass_cost_below_the_narrowest_pass_costs_its_share():
    cost = PassCost()
    cost.observe(8, 0.080)
    assert cost.curve()(4) == pytest.approx(0.040)


def linear(fixed: float, per_token: float):
    return lambda width: fixed + per_token * width


def test_no_drafts_where_every_token_costs_a_pass_share():
    """8 streams on a 2-core CPU, already compute-bound (passes measured with the embedded model,
    milliseconds by width): even a likely draft costs more than it returns."""
    cost = PassCost()
    for width, ms in [(1, 12.9), (8, 51.8), (24, 176.3), (48, 312.3), (72, 364.9)]:
        cost.observe(width, ms / 1000)
    assert plan_lengths(8, [(0.9, 8)] * 8, cost.curve(), 500) == [0] * 8
    assert plan_lengths(1, [(0.97, 16)], cost.curve(), 500)[0] > 0  # one stream: drafts pay


def test_long_drafts_where_a_wider_pass_costs_little_more():
    assert plan_lengths(1, [(0.97, 32)], linear(1.0, 0.05), 500)[0] >= 24
    assert plan_lengths(1, [(0.97, 32)], linear(1.0, 0.05), 10) == [10]  # the room holds


def test_likelier_offers_draft_more():
    short, long = plan_lengths(2, [(0.4, 16), (0.95, 16)], linear(1.0, 0.2), 500)
    assert long > short


def increasing(costs: list[float]):
    """A pass cost by width that only grows: each width costs the one before plus its step."""
    steps = list(itertools.accumulate(costs))
    return lambda width: steps[width - 1]


def expected_rate(decoding, offers, lengths, cost):
    expected = decoding + sum(
        sum(rate**j for j in range(1, k + 1)) for (rate, _), k in zip(offers, lengths, strict=True)
    )
    width = decoding + sum(lengths)
    return expected / cost(width) if width else 0.0


@settings(max_examples=300, deadline=None)
@given(
    decoding=st.integers(1, 4),
    offers=st.lists(st.tuples(st.floats(0.05, 0.99), st.integers(0, 4)), min_size=1, max_size=3),
    costs=st.lists(st.floats(0.1, 3.0), min_size=20, max_size=20),
    room=st.integers(0, 12),
)
def test_plan_lengths_finds_the_best_expected_tokens_per_second(decoding, offers, costs, room):
    """Against every allocation, by brute force, on any increasing pass cost."""
    cost = increasing(costs)
    lengths = plan_lengths(decoding, offers, cost, room)
    assert all(0 <= k <= most for k, (_, most) in zip(lengths, offers, strict=True))
    assert sum(lengths) <= room
    # tokens less likely than UNLIKELY are never drafted; every other allocation is a candidate
    bounds = [
        max((j for j in range(most + 1) if j == 0 or rate**j >= UNLIKELY), default=0) for rate, most in offers
    ]
    best = max(
        expected_rate(decoding, offers, candidate, cost)
        for candidate in itertools.product(*(range(b + 1) for b in bounds))
        if sum(candidate) <= room
    )
    plain = decoding / cost(decoding)
    if best > (1 + GAIN_MARGIN) * plain:
        assert expected_rate(decoding, offers, lengths, cost) == pytest.approx(best, rel=1e-9)
    else:  # no draft promises enough: none
        assert lengths == [0] * len(offers)


def test_one_length_for_all_drafts_where_a_wider_pass_costs_little_more():
    """A GPU's pass of a small model: its cost barely moves with the width, so the likely
    offers set a long common length and the others are padded to it."""
    assert plan_equal_length(8, [(0.95, 20), (0.9, 5), (0.5, 0)], linear(1.0, 0.002), 500) == 20
    assert plan_equal_length(8, [(0.95, 20), (0.9, 5)], linear(1.0, 0.002), 10) == 5  # the room holds


def test_no_common_length_where_every_token_costs_a_pass_share():
    cost = PassCost()
    for width, ms in [(1, 12.9), (8, 51.8), (24, 176.3), (48, 312.3), (72, 364.9)]:
        cost.observe(width, ms / 1000)
    assert plan_equal_length(8, [(0.9, 8)] * 8, cost.curve(), 500) == 0
    assert plan_equal_length(8, [(0.99, 0)] * 8, linear(1.0, 0.0), 500) == 0  # nothing proposed


@settings(max_examples=300, deadline=None)
@given(
    decoding=st.integers(1, 4),
    offers=st.lists(st.tuples(st.floats(0.05, 0.99), st.integers(0, 6)), min_size=1, max_size=4),
    costs=st.lists(st.floats(0.1, 3.0), min_size=30, max_size=30),
    room=st.integers(0, 20),
)
def test_plan_equal_length_finds_the_best_expected_tokens_per_second(decoding, offers, costs, room):
    """Against every length, by brute force: padding counts in the width, never in the tokens."""
    cost = increasing(costs)
    length = plan_equal_length(decoding, offers, cost, room)
    assert len(offers) * length <= room
    assert length <= max(most for _, most in offers)

    def rate(k: int) -> float:
        expected = decoding + sum(sum(a**j for j in range(1, min(k, most) + 1)) for a, most in offers)
        return expected / cost(decoding + len(offers) * k)

    candidates = range(min(max(most for _, most in offers), room // len(offers)) + 1)
    best = max(rate(k) for k in candidates)
    if best > (1 + GAIN_MARGIN) * rate(0):
        assert rate(length) == pytest.approx(best, rel=1e-9)
    else:  # no length promises enough: none
        assert length == 0


def test_equal_drafts_are_padded_and_the_padding_counts_for_nothing():
    drafts = Drafts(Speculation(draft_max=8), equal=True)
    for width in (2, 16):
        drafts.cost.observe(width, 1.0)  # a pass costs the same at any width
    copying = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]
    novel = [1, 2, 3, 4]
    wants = [Want("a", 0, copying, 20), Want("b", 1, novel, 20)]
    made = drafts.propose(wants, decoding=2, room=40)
    assert made["a"] == [7, 8, 9, 5, 6]  # the longest proposal sets the length
    assert made["b"] == [4] * 5  # b proposed nothing: all padding
    assert drafts.record("a", 5, 5) == (5, 5)
    assert drafts.record("b", 5, 3) == (0, 0)  # padding: neither proposed nor confirmed


@pytest.mark.parametrize("equal", [False, True])
def test_draft_min_drafts_where_the_planner_would_not(equal):
    drafts = Drafts(Speculation(draft_max=8, draft_min=3), equal=equal)
    for width, seconds in [(1, 1.0), (16, 16.0)]:
        drafts.cost.observe(width, seconds)  # every token costs a pass: nothing pays
    wants = [Want("a", 0, [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], 20), Want("b", 1, [1, 2, 3, 4], 20)]
    made = drafts.propose(wants, decoding=2, room=40)
    assert made["a"] == [7, 8, 9]
    assert made.get("b", []) == ([4, 4, 4] if equal else [])  # nothing found: padding only


def test_draft_min_within_each_offer_and_the_room():
    dear = linear(0.0, 1.0)  # every token costs a pass: nothing pays by itself
    assert plan_lengths(1, [(0.9, 5), (0.9, 1), (0.9, 0)], dear, 10, least=3) == [3, 1, 0]
    assert plan_lengths(1, [(0.9, 5), (0.9, 5)], dear, 4, least=3) == [3, 1]  # the room holds
    assert plan_equal_length(2, [(0.9, 5), (0.9, 0)], dear, 10, least=3) == 3
    assert plan_equal_length(2, [(0.9, 0), (0.9, 0)], dear, 10, least=3) == 0  # nothing found


def test_an_engine_option_out_of_order_names_the_field():
    from llmflow.engines.llama_cpp import LlamaCppOptions

    with pytest.raises(ValueError, match="draft_min"):
        LlamaCppOptions(draft_min=8, draft_max=4)


def test_settings_are_checked():
    with pytest.raises(ValueError):
        Speculation(draft_max=0)
    with pytest.raises(ValueError):
        Speculation(ngram_min=3, ngram_max=2)
    with pytest.raises(ValueError):
        Speculation(draft_max=4, draft_min=5)
    with pytest.raises(ValueError):
        PromptLookup([], ngram_min=0)
    assert Speculation().lookup([1, 2, 3, 1, 2]).propose(3) == [3, 1, 2]


def test_a_proposal_stops_before_an_image_position():
    """An image's positions (negative ids) in a prompt are never proposed: no pass could verify them."""
    lookup = PromptLookup([5, 6, 7, -3, -4, 8, 5, 6], ngram_min=1, ngram_max=2)
    assert lookup.propose(4) == [7]
    assert PromptLookup([5, 6, -3, 7, 5], ngram_min=1, ngram_max=1).propose(3) == [6]
