"""Prompt lookup and the draft rules (no model): what `PromptLookup` proposes, how much of a draft
the model's picks confirm, and how long the next draft may be."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow.engines.speculation import DraftLength, PromptLookup, Speculation, accepted_prefix

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


@settings(max_examples=200, deadline=None)
@given(maximum=st.integers(1, 16), rounds=st.lists(st.tuples(st.integers(0, 16), st.integers(0, 16))))
def test_draft_length_stays_within_one_and_the_maximum(maximum, rounds):
    length = DraftLength(maximum)
    for drafted, accepted in rounds:
        drafted = min(drafted, length.current)
        length.update(drafted, min(accepted, drafted))
        assert 1 <= length.current <= maximum


def test_draft_length_grows_on_whole_drafts_and_shrinks_on_rejections():
    length = DraftLength(8, start=2)
    length.update(2, 2)
    assert length.current == 4
    length.update(4, 1)
    assert length.current == 2
    length.update(2, 0)
    assert length.current == 1
    length.update(0, 0)  # no draft: nothing learnt
    assert length.current == 1


def test_settings_are_checked():
    with pytest.raises(ValueError):
        Speculation(draft_max=0)
    with pytest.raises(ValueError):
        Speculation(ngram_min=3, ngram_max=2)
    with pytest.raises(ValueError):
        PromptLookup([], ngram_min=0)
    assert Speculation().lookup([1, 2, 3, 1, 2]).propose(3) == [3, 1, 2]


def test_a_proposal_stops_before_an_image_position():
    """An image's positions (negative ids) in a prompt are never proposed: no pass could verify them."""
    lookup = PromptLookup([5, 6, 7, -3, -4, 8, 5, 6], ngram_min=1, ngram_max=2)
    assert lookup.propose(4) == [7]
    assert PromptLookup([5, 6, -3, 7, 5], ngram_min=1, ngram_max=1).propose(3) == [6]
