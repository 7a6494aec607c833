from hypothesis import given
from hypothesis import strategies as st

from llmflow.streaming import ByteDetokenizer, stream_chunks
from llmflow.types import CancelToken, FinishReason

EOS = 0


class ScriptedTokens:
    """Token ids 1..n whose pieces are given bytes; records how many were pulled."""

    def __init__(self, pieces: list[bytes], then_eos: bool = True):
        self.table = {EOS: b"", **{i + 1: p for i, p in enumerate(pieces)}}
        self.ids = [*range(1, len(pieces) + 1), *([EOS] if then_eos else [])]
        self.pulled = 0
        self.closed = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.pulled >= len(self.ids):
            raise StopIteration
        self.pulled += 1
        return self.ids[self.pulled - 1]

    def close(self):
        self.closed = True


def run(pieces, *, stop=(), max_tokens=100, then_eos=True, cancel=None):
    tokens = ScriptedTokens(pieces, then_eos)
    chunks = list(
        stream_chunks(
            tokens,
            ByteDetokenizer(tokens.table.__getitem__),
            stop=tuple(stop),
            max_tokens=max_tokens,
            eos_token_ids={EOS},
            prompt_tokens=7,
            cancel=cancel,
        )
    )
    return chunks, tokens


def test_text_then_one_final_chunk():
    chunks, tokens = run([b"Hel", b"lo", b"!"])
    assert [c.text for c in chunks] == ["Hel", "lo", "!", ""]
    final = chunks[-1]
    assert final.finish_reason is FinishReason.STOP
    assert final.usage.prompt_tokens == 7
    assert final.usage.completion_tokens == 4  # three text tokens and the end-of-generation token
    assert tokens.closed
    assert [c.is_final for c in chunks] == [False, False, False, True]


def test_max_tokens_counts_tokens_not_chunks():
    # each character of 大 is split over three tokens: 6 tokens but only 2 chunks
    pieces = [bytes([b]) for b in "大阪城".encode()]
    chunks, tokens = run(pieces, max_tokens=6, then_eos=False)
    assert [c.text for c in chunks] == ["大", "阪", ""]
    assert chunks[-1].finish_reason is FinishReason.LENGTH
    assert chunks[-1].usage.completion_tokens == 6
    assert tokens.pulled == 6


def test_multi_token_stop_string():
    chunks, tokens = run([b"Yes", b"<|", b"im", b"_end", b"|>", b"more"], stop=["<|im_end|>"])
    assert "".join(c.text for c in chunks) == "Yes"
    assert chunks[-1].finish_reason is FinishReason.STOP
    assert tokens.pulled == 5
    assert tokens.closed


def test_held_prefix_flushed_at_eos():
    chunks, _ = run([b"a", b"<|"], stop=["<|im_end|>"])
    assert [c.text for c in chunks] == ["a", "<|", ""]


def test_context_exhausted_is_length():
    chunks, _ = run([b"a", b"b"], then_eos=False)
    assert chunks[-1].finish_reason is FinishReason.LENGTH


def test_cancel_from_another_thread_stops_before_next_token():
    cancel = CancelToken()
    tokens = ScriptedTokens([b"a", b"b", b"c", b"d"])
    stream = stream_chunks(
        tokens,
        ByteDetokenizer(tokens.table.__getitem__),
        stop=(),
        max_tokens=100,
        eos_token_ids={EOS},
        prompt_tokens=1,
        cancel=cancel,
    )
    assert next(stream).text == "a"
    cancel.cancel()
    rest = list(stream)
    assert rest[-1].finish_reason is FinishReason.CANCELLED
    assert rest[-1].usage.completion_tokens == 1
    assert tokens.pulled == 2 and tokens.closed


def test_consumer_closing_the_stream_closes_the_engine():
    tokens = ScriptedTokens([b"a", b"b", b"c"])
    stream = stream_chunks(
        tokens,
        ByteDetokenizer(tokens.table.__getitem__),
        stop=(),
        max_tokens=100,
        eos_token_ids={EOS},
        prompt_tokens=1,
    )
    next(stream)
    stream.close()
    assert tokens.closed and tokens.pulled == 1


@given(
    st.text(max_size=30),
    st.lists(st.integers(min_value=0), max_size=20),
    st.lists(st.text(min_size=1, max_size=4), max_size=3),
)
def test_property_stream_equals_whole_text_up_to_stop(s, cuts, stops):
    data = s.encode()
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    pieces = [p for p in pieces if p]
    chunks, _ = run(pieces, stop=stops)
    texts = [c.text for c in chunks[:-1]]
    assert all(texts)
    assert not any("\ufffd" in t for t in texts)
    matches = [i for i in (s.find(x) for x in stops) if i != -1]
    assert "".join(texts) == (s[: min(matches)] if matches else s)
    assert chunks[-1].finish_reason is FinishReason.STOP


def test_a_character_cut_by_max_tokens_is_dropped_not_broken():
    pieces = [b"a", "大".encode()[:2], "大".encode()[2:]]
    chunks, _ = run(pieces, max_tokens=2, then_eos=False)
    assert [c.text for c in chunks] == ["a", ""]
    assert chunks[-1].finish_reason is FinishReason.LENGTH
