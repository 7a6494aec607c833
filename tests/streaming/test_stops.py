import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmflow.streaming.stops import StopMatcher


def run(stops, pieces):
    """Feed pieces; return (emitted text, stopped)."""
    matcher = StopMatcher(stops)
    out = []
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    out.append(matcher.flush())
    return "".join(out), False


@pytest.mark.parametrize(
    ("stops", "pieces", "expected", "stopped"),
    [
        ([], ["Hello", " world"], "Hello world", False),
        (["STOP"], ["Hello", " world"], "Hello world", False),
        (["STOP"], ["Hello ST", "OP and more"], "Hello ", True),
        # a stop inside one token, followed by more text in the same token
        (["<end>"], ["abc<end>def"], "abc", True),
        # a stop spanning three tokens
        (["<|im_end|>"], ["Hi", "<|", "im", "_end", "|>", "after"], "Hi", True),
        # a prefix that turns out not to be a stop is released, not lost
        (["<|im_end|>"], ["a<|", "im", "x"], "a<|imx", False),
        # two stops complete in the same chunk: the earliest-starting one cuts
        (["world", "lo w"], ["Hello world"], "Hel", True),
        (["bc", "abcd"], ["xabcd"], "x", True),
        # held text flushed at the end
        (["STOP"], ["abc", "ST"], "abcST", False),
        # Japanese and emoji
        (["。"], ["大阪", "城です", "。次"], "大阪城です", True),
        (["👋🏽"], ["hi 👋", "🏽 there"], "hi ", True),
    ],
)
def test_table(stops, pieces, expected, stopped):
    assert run(stops, pieces) == (expected, stopped)


def test_holds_only_a_possible_stop_prefix():
    matcher = StopMatcher(["<|im_end|>"])
    assert matcher.feed("Hello <") == ("Hello ", False)
    assert matcher.held == "<"
    assert matcher.feed("b") == ("<b", False)
    assert matcher.held == ""


def test_rejects_empty_stop_string():
    with pytest.raises(ValueError):
        StopMatcher([""])


text = st.text(min_size=0, max_size=60)
stop_list = st.lists(st.text(min_size=1, max_size=6), min_size=0, max_size=4)


def split_at(s, cuts):
    points = sorted({c % (len(s) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(s[last:p])
        last = p
    pieces.append(s[last:])
    return pieces


@given(text, stop_list, st.lists(st.integers(min_value=0), max_size=20))
def test_property_matches_whole_text_semantics(s, stops, cuts):
    """However the text is split, the output is the text up to the earliest stop."""
    emitted, stopped = run(stops, split_at(s, cuts))
    matches = [i for i in (s.find(stop) for stop in stops) if i != -1]
    if matches:
        assert stopped
        assert emitted == s[: min(matches)]
    else:
        assert not stopped
        assert emitted == s


@given(text, stop_list, st.lists(st.integers(min_value=0), max_size=20))
def test_property_never_emits_a_stop_and_holds_minimally(s, stops, cuts):
    matcher = StopMatcher(stops)
    for piece in split_at(s, cuts):
        out, stopped = matcher.feed(piece)
        for stop in stops:
            assert stop not in out
        if stopped:
            break
        held = matcher.held
        # whatever is held could still become a stop string
        assert held == "" or any(stop.startswith(held) for stop in stops)
