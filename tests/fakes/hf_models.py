"""Hugging Face model directories for tests: a tiny random Llama with a byte-level tokenizer
(built in code, seconds, no download) and the embedded SmolLM2 GGUF converted to safetensors
(a real model, converted once and cached)."""

from __future__ import annotations

import shutil
from pathlib import Path

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_tokenizer(vocab_size: int = 0):
    """A byte-level BPE tokenizer: one token per UTF-8 byte, so every multi-byte character spans
    several tokens, plus (up to `vocab_size`) merges of printable ASCII pairs and triples, so a
    random model of a real vocabulary size decodes to text. ChatML specials; EOS is <|im_end|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet, key=lambda c: ord(c)))}
    merges = _ascii_merges(vocab, vocab_size - len(SPECIAL_TOKENS))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def _ascii_merges(vocab: dict[str, int], size: int) -> list[tuple[str, str]]:
    """Adds ASCII pairs, then triples, to `vocab` until it holds `size` entries."""
    letters = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    merges: list[tuple[str, str]] = []
    for left_letters in (letters, [a + b for a in letters for b in letters]):
        for left in left_letters:
            for right in letters:
                if len(vocab) >= size:
                    return merges
                if left + right not in vocab:
                    merges.append((left, right))
                    vocab[left + right] = len(vocab)
    return merges


def tiny_llama(tokenizer, *, seed: int = 0, layers: int = 2, hidden: int = 64):
    """A randomly initialised Llama sized to `tokenizer`; deterministic for a given seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def write_tiny_model(directory: Path) -> Path:
    tokenizer = byte_tokenizer()
    tiny_llama(tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def convert_gguf(gguf: Path, directory: Path) -> Path:
    """Dequantise a GGUF file into a safetensors directory (transformers refuses to save a model it
    loaded from GGUF, so the GGUF marker is dropped first). Written to a temporary folder and
    renamed, so an interrupted conversion never leaves a half directory behind."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(directory)
    return directory


def smollm2_hf_dir() -> Path:
    """The embedded SmolLM2 GGUF as a Hugging Face directory, converted on first use and kept in
    the temporary directory under a name keyed by the GGUF's size and mtime (about 35 s once)."""
    import tempfile

    from llmflow.model_files import default_model_path

    gguf = default_model_path()
    stat = gguf.stat()
    target = (
        Path(tempfile.gettempdir())
        / "llmflow-test-models"
        / f"smollm2-hf-{stat.st_size}-{int(stat.st_mtime)}"
    )
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return convert_gguf(gguf, target)
    except OSError:
        if (target / "config.json").is_file():  # another process converted it first
            return target
        raise
