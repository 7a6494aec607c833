from hypothesis import given
from hypothesis import strategies as st

from llmflow.streaming.detokenizer import ByteDetokenizer


def detokenize(pieces: list[bytes]) -> list[str]:
    table = dict(enumerate(pieces))
    detok = ByteDetokenizer(table.__getitem__)
    out = [detok.step(i) for i in range(len(pieces))]
    out.append(detok.flush())
    return [t for t in out if t is not None]


def byte_tokens(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def test_emoji_split_across_tokens():
    data = "hi 👋🏽!".encode()
    pieces = [data[:4], data[4:6], data[6:9], data[9:]]
    chunks = detokenize(pieces)
    assert "".join(chunks) == "hi 👋🏽!"
    assert all(chunks) and not any("\ufffd" in c for c in chunks)


def test_japanese_byte_tokens():
    text = "大阪城は有名です。"
    pieces = [bytes([b]) for b in text.encode()]
    chunks = detokenize(pieces)
    assert chunks == list(text)


def test_invalid_bytes_become_replacement_like_a_whole_decode():
    pieces = [b"ok", b"\xff", b"\xe5\xa4", b"!"]
    assert "".join(detokenize(pieces)) == b"".join(pieces).decode("utf-8", errors="replace")


def test_incomplete_character_at_end_is_flushed():
    pieces = [b"a", "大".encode()[:2]]
    assert "".join(detokenize(pieces)) == "a\ufffd"


unicode_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S", "Zs", "So"]),
    max_size=40,
) | st.sampled_from(["大阪の観光名所をひとつ教えて。", "e\u0301\u0308", "👩‍👩‍👧‍👦🇯🇵", "ｶﾀｶﾅ"])


@given(unicode_text, st.lists(st.integers(min_value=0), max_size=30))
def test_property_any_split_gives_whole_characters(s, cuts):
    chunks = detokenize(byte_tokens(s.encode(), cuts))
    assert "".join(chunks) == s
    assert all(chunks)  # never an empty chunk
    assert not any("\ufffd" in c for c in chunks)


@given(st.binary(max_size=40), st.lists(st.integers(min_value=0), max_size=30))
def test_property_arbitrary_bytes_equal_whole_decode(data, cuts):
    chunks = detokenize(byte_tokens(data, cuts))
    assert "".join(chunks) == data.decode("utf-8", errors="replace")
    assert all(chunks)
