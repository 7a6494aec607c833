"""Reading a Hugging Face model directory's tokenizer files: token bytes (checked against the
`tokenizers` library's own decoding where it is installed), EOS ids, BOS and the chat template."""

from __future__ import annotations

import json

import pytest

from llmflow.engines.hf_files import HfModelDir, bytes_to_unicode, token_bytes_table
from llmflow.errors import ModelNotFound
from llmflow.prompts import prompt_format_of
from llmflow.types import Message

TEXTS = [
    "Hello, world!",
    "大阪城は有名です。",
    "emoji 🏯 and ✓ done",
    "  two  spaces\nnewline\ttab",
    "naïve café",
]


def _write(path, name, data):
    (path / name).write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def test_byte_level_pieces_map_back_to_bytes():
    alphabet = bytes_to_unicode()
    assert len(set(alphabet.values())) == 256
    vocab = {"Ġhello": 0, alphabet[0xE5] + alphabet[0xA4]: 1, alphabet[0xA7]: 2, "<|end|>": 3}
    table = token_bytes_table(
        {
            "model": {"type": "BPE", "vocab": vocab},
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [
                {"id": 3, "content": "<|end|>", "special": True},
                {"id": 5, "content": "<x>", "special": False},
            ],
        },
        size=8,
    )
    assert table[0] == b" hello"
    assert (table[1] + table[2]).decode() == "大"  # one character split over two tokens
    assert table[3] == b""  # special tokens are not text
    assert table[5] == b"<x>"
    assert len(table) == 8 and table[7] == b""


def test_sentencepiece_style_pieces_use_byte_fallback_and_spaces():
    decoder = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    table = token_bytes_table(
        {"model": {"vocab": {"\u2581Hello": 0, "<0xE5>": 1, "<0x00>": 2}}, "decoder": decoder}
    )
    assert table == [b" Hello", b"\xe5", b"\x00"]
    metaspace = token_bytes_table(
        {"model": {"vocab": {"\u2581a\u2581b": 0}}, "decoder": {"type": "Metaspace"}}
    )
    assert metaspace == [b" a b"]


def test_an_unknown_decoder_is_refused_at_load():
    with pytest.raises(ModelNotFound, match="WordPiece"):
        token_bytes_table({"model": {"vocab": {"a": 0}}, "decoder": {"type": "WordPiece"}})


def test_model_directory_files(tmp_path):
    _write(
        tmp_path,
        "tokenizer.json",
        {
            "model": {"vocab": {"a": 0}},
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [
                {"id": 7, "content": "<s>", "special": True},
                {"id": 8, "content": "</s>", "special": True},
            ],
            "post_processor": {
                "type": "Sequence",
                "processors": [
                    {"type": "ByteLevel"},
                    {
                        "type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                    },
                ],
            },
        },
    )
    _write(
        tmp_path,
        "tokenizer_config.json",
        {
            "bos_token": {"content": "<s>"},
            "eos_token": "</s>",
            "chat_template": [
                {"name": "tool_use", "template": "x"},
                {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"},
            ],
        },
    )
    _write(tmp_path, "config.json", {"eos_token_id": [8, 9]})
    _write(tmp_path, "generation_config.json", {"eos_token_id": 10})
    files = HfModelDir(tmp_path)
    assert files.eos_token_ids() == {8, 9, 10}
    assert files.bos_token_id() == 7
    assert files.adds_bos()
    assert prompt_format_of(files.template_text()).render([Message("user", "hi")]) == "<s>hi"
    _write(tmp_path, "chat_template.jinja", "{{ eos_token }}")  # newer saves: a file of its own wins
    assert prompt_format_of(HfModelDir(tmp_path).template_text()).render([Message("user", "hi")]) == "</s>"
    _write(tmp_path, "tokenizer_config.json", {"add_bos_token": False})
    assert not HfModelDir(tmp_path).adds_bos()


def test_missing_files_mean_no_template_and_no_bos(tmp_path):
    files = HfModelDir(tmp_path)
    assert files.template_text().source is None
    assert not files.adds_bos()
    assert files.eos_token_ids() == frozenset()


def test_unreadable_json_is_a_clear_error(tmp_path):
    _write(tmp_path, "config.json", "{not json")
    with pytest.raises(ModelNotFound, match=r"config\.json"):
        HfModelDir(tmp_path)


def _assert_table_matches_tokenizer(tokenizer, table):
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        streamed = b"".join(table[i] for i in ids).decode("utf-8", errors="replace")
        assert streamed.lstrip(" ") == tokenizer.decode(ids).lstrip(" "), text


def test_smollm2_table_matches_the_tokenizers_library():
    tokenizers = pytest.importorskip("tokenizers")
    from tests.models import Unavailable, smollm2_tokenizer_dir

    try:
        directory = smollm2_tokenizer_dir()
    except Unavailable as exc:
        pytest.skip(str(exc))
    tokenizer = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    files = HfModelDir(directory)
    table = files.token_bytes()
    assert len(table) == tokenizer.get_vocab_size()
    _assert_table_matches_tokenizer(tokenizer, table)
    assert files.eos_token_ids() == {2} and not files.adds_bos()
    assert "<|im_start|>assistant\n" in prompt_format_of(files.template_text()).render(
        [Message("user", "hi")]
    )


def test_byte_fallback_table_matches_the_tokenizers_library():
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, normalizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", *byte_tokens])
    tokenizer.train_from_iterator(["Hello world, hello there", "spaces and tabs"] * 50, trainer)
    table = token_bytes_table(json.loads(tokenizer.to_str()))
    _assert_table_matches_tokenizer(tokenizer, table)
