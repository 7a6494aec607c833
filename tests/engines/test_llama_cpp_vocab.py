"""The llama.cpp engines' tokenizer: llmflow calls llama.cpp directly (one call, whatever the
text's length); the tokens must be llama-cpp-python's own."""

from __future__ import annotations

import pytest

TEXTS = [
    "",
    "hello",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "大阪の観光名所をひとつ教えて。 " * 50,
    "<|im_start|>" * 40,
    # past the model's training context (8,192 tokens): llama-cpp-python tokenizes it twice
    "<|im_start|>system\n" + "The quick brown fox jumps over the lazy dog. " * 1200 + "<|im_end|>\n",
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
@pytest.mark.parametrize("special", [True, False])
def test_tokens_are_llama_cpp_pythons_own(embedded_llm, text, special):
    engine = embedded_llm.engine
    tokens = engine.tokenize(text, add_special=special, parse_special=special)
    add_bos = special and engine.llama.metadata.get("tokenizer.ggml.add_bos_token") == "true"
    assert tokens == engine.llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)


def test_a_long_conversation_is_tokenized_whole(embedded_llm):
    text = TEXTS[-1]
    tokens = embedded_llm.tokenize(text)
    assert len(tokens) > 8192
    assert embedded_llm.detokenize(tokens) == text
