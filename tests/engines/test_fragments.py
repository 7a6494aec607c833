"""Fragment-by-fragment tokenization: pure logic with a stand-in tokenizer, then llama.cpp's own
tokens against it on the embedded model's vocabulary."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow.engines.fragments import FragmentTokenizer, overlapping

SPECIALS = {b"<|im_start|>": 1, b"<|im_end|>": 2, b"<|endoftext|>": 0}


def recording_tokenizer(budget: int = 1 << 20) -> tuple[FragmentTokenizer, list[bytes]]:
    calls: list[bytes] = []

    def raw(fragment: bytes) -> list[int]:
        calls.append(fragment)
        return [100 + b for b in fragment]

    tokenizer = FragmentTokenizer.of(SPECIALS, raw, budget)
    assert tokenizer is not None
    return tokenizer, calls


def test_special_tokens_split_the_text_and_fragments_seen_are_not_tokenized_again():
    tokenizer, calls = recording_tokenizer()
    turn = b"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert tokenizer.tokenize(turn) == [1, *(100 + b for b in b"system\nBe brief."), 2, 110, 1,
                                        *(100 + b for b in b"user\nHi"), 2, 110]  # fmt: skip
    assert calls == [b"system\nBe brief.", b"\n", b"user\nHi"]
    calls.clear()
    tokenizer.tokenize(turn + b"<|im_start|>assistant\n")
    assert calls == [b"assistant\n"]


def test_the_budget_keeps_the_most_recent_fragments():
    tokenizer, calls = recording_tokenizer(budget=50)  # a fragment of 6 bytes: 6 + 4 x 6 tokens
    for text in (b"aaaaaa", b"bbbbbb", b"aaaaaa"):
        tokenizer.tokenize(text)
    assert calls == [b"aaaaaa", b"bbbbbb", b"aaaaaa"]  # a was evicted for b
    tokenizer.tokenize(b"aaaaaa")
    assert calls[-1] == b"aaaaaa" and len(calls) == 3
    tokenizer.tokenize(b"x" * 20)  # larger than the budget: tokenized, not kept
    tokenizer.tokenize(b"x" * 20)
    assert calls[-2:] == [b"x" * 20, b"x" * 20]


def test_texts_that_split_ambiguously_are_refused():
    assert overlapping([b"<a>", b"<a><b>"])  # one holds the other
    assert overlapping([b"ab", b"bc"])  # "abc": llama.cpp takes the longer or the first, not both
    assert not overlapping(list(SPECIALS))
    assert FragmentTokenizer.of({b"ab": 1, b"bc": 2}, list) is None
    assert FragmentTokenizer.of({b"": 1}, list) is None
    assert FragmentTokenizer.of({}, list) is None


PIECES = st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "im_end|>", "<", "|>",
                          "\n", " ", "  ", "\t", "user", "assistant", "system", "Hello, world!", "don't",
                          "123 456", "大阪の観光名所", "émoji 🎉", "<repo_name>", "<file_sep>",
                          "x<|im_end|>y"])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=30))
def test_the_tokens_are_llama_cpps_own_for_any_text(embedded_llm, parts):
    engine = embedded_llm.engine
    text = "".join(parts)
    whole = engine.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert engine.tokenize(text, add_special=False, parse_special=True) == whole
    assert engine.tokenize(text, add_special=True, parse_special=True) == whole  # SmolLM2 adds no BOS


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=8))
def test_a_rendered_conversation_turn_after_turn_is_tokenized_as_a_whole(embedded_llm, contents):
    messages = [{"role": "system", "content": "You are a terse assistant."}]
    for i, content in enumerate(contents):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": content})
        text = embedded_llm.render(messages)
        expected = embedded_llm.engine.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        assert embedded_llm.tokenize(text) == expected
