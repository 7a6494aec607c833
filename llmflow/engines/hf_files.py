"""What a Hugging Face-format model directory says about its tokenizer: each token's bytes, the
end-of-generation ids, whether a BOS token is prepended, and the chat template.

Read from `tokenizer.json`, `tokenizer_config.json`, `config.json`, `generation_config.json` and
`chat_template.jinja` with the standard library only, so engines that load such directories share it
and it is tested without them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.errors import ModelNotFound
from llmflow.types import TemplateText

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelNotFound(f"{str(path)!r} is not readable JSON: {exc}") from None
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _ids(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character (tokenizers' ByteLevel)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _flatten(decoder: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    if not decoder:
        return
    if decoder.get("type") == "Sequence":
        for inner in decoder.get("decoders", []):
            yield from _flatten(inner)
    else:
        yield decoder


@dataclass(frozen=True)
class _PieceDecoder:
    """Turns one vocabulary entry into bytes the way the tokenizer's decoder would, minus the
    whole-text steps (a leading-space strip), which do not apply to a token in mid-stream."""

    byte_level: bool
    byte_fallback: bool
    replacements: tuple[tuple[str, str], ...]

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: dict[str, Any]) -> _PieceDecoder:
        byte_level = byte_fallback = False
        replacements: list[tuple[str, str]] = []
        for step in _flatten(tokenizer_json.get("decoder")):
            kind = step.get("type")
            if kind == "ByteLevel":
                byte_level = True
            elif kind == "ByteFallback":
                byte_fallback = True
            elif kind == "Metaspace":
                replacements.append((step.get("replacement", "\u2581"), " "))
            elif kind == "Replace" and isinstance(step.get("pattern", {}).get("String"), str):
                replacements.append((step["pattern"]["String"], step.get("content", "")))
            elif kind not in ("Fuse", "Strip"):
                raise ModelNotFound(f"tokenizer.json uses a {kind!r} decoder, which llmflow cannot stream")
        if not (byte_level or byte_fallback or replacements):
            raise ModelNotFound(
                "tokenizer.json has no decoder llmflow knows (ByteLevel, ByteFallback, Metaspace)"
            )
        return cls(byte_level, byte_fallback, tuple(replacements))

    @cached_property
    def _unicode_to_byte(self) -> dict[str, int]:
        return {c: b for b, c in bytes_to_unicode().items()}

    def __call__(self, piece: str) -> bytes:
        if self.byte_level:
            table = self._unicode_to_byte
            try:
                return bytes(table[c] for c in piece)
            except KeyError:  # not in the byte alphabet: literal text
                return b"".join(bytes([table[c]]) if c in table else c.encode() for c in piece)
        if self.byte_fallback:
            match = _BYTE_TOKEN.fullmatch(piece)
            if match:
                return bytes([int(match.group(1), 16)])
        for old, new in self.replacements:
            piece = piece.replace(old, new)
        return piece.encode("utf-8")


def token_bytes_table(tokenizer_json: dict[str, Any], size: int = 0) -> list[bytes]:
    """Each token id's bytes, at least `size` entries (ids the tokenizer lacks give b"").

    Special added tokens render as nothing: they structure a turn, they are not text."""
    decode = _PieceDecoder.from_tokenizer_json(tokenizer_json)
    vocab: dict[str, int] = tokenizer_json.get("model", {}).get("vocab", {})
    if not isinstance(vocab, dict):
        raise ModelNotFound("tokenizer.json has no vocabulary of pieces (model.vocab)")
    added = {t["id"]: t for t in tokenizer_json.get("added_tokens", []) if isinstance(t.get("id"), int)}
    table = [b""] * max(size, max(vocab.values(), default=-1) + 1, max(added, default=-1) + 1)
    for piece, token_id in vocab.items():
        table[token_id] = decode(piece)
    for token_id, token in added.items():
        table[token_id] = b"" if token.get("special") else str(token.get("content", "")).encode("utf-8")
    return table


def token_vocabulary(
    tokenizer_json: dict[str, Any],
    eos_token_ids: frozenset[int],
    encode: Callable[[bytes], list[int]],
    size: int = 0,
) -> TokenVocabulary:
    """The vocabulary for output constraints: every token's bytes, special added tokens as their
    text (they are masked like any token, and allowed where a grammar names them)."""
    tokens = token_bytes_table(tokenizer_json, size)
    special = set()
    for token in tokenizer_json.get("added_tokens", []):
        if isinstance(token.get("id"), int) and token.get("special"):
            tokens[token["id"]] = str(token.get("content", "")).encode("utf-8")
            special.add(token["id"])
    return TokenVocabulary(tokens, frozenset(special), eos_token_ids, encode, size)


class HfModelDir:
    """The tokenizer-related files of one model directory, read once."""

    def __init__(self, path: Path):
        self.path = path
        self.tokenizer_json = _read_json(path / "tokenizer.json")
        self.tokenizer_config = _read_json(path / "tokenizer_config.json")
        self.config = _read_json(path / "config.json")
        self.generation_config = _read_json(path / "generation_config.json")

    def token_bytes(self, size: int = 0) -> list[bytes]:
        return token_bytes_table(self.tokenizer_json, size)

    def special_token_texts(self) -> dict[int, bytes]:
        """Special added tokens' text by id (the bytes table renders them as nothing)."""
        added = self.tokenizer_json.get("added_tokens", [])
        return {
            t["id"]: str(t.get("content", "")).encode("utf-8")
            for t in added
            if isinstance(t.get("id"), int) and t.get("special")
        }

    def token_id(self, text: str) -> int | None:
        """The id of a piece or added token, by its exact text."""
        for token in self.tokenizer_json.get("added_tokens", []):
            if token.get("content") == text:
                return token.get("id")
        return self.tokenizer_json.get("model", {}).get("vocab", {}).get(text)

    @property
    def bos_text(self) -> str:
        return _token_text(self.tokenizer_config.get("bos_token"))

    @property
    def eos_text(self) -> str:
        return _token_text(self.tokenizer_config.get("eos_token"))

    def eos_token_ids(self) -> frozenset[int]:
        """Every id that ends a generation: the model's and generation config's EOS ids (often a
        list, e.g. Llama 3's <|eot_id|>) and the tokenizer's EOS token."""
        ids = {*_ids(self.config.get("eos_token_id")), *_ids(self.generation_config.get("eos_token_id"))}
        eos = self.token_id(self.eos_text) if self.eos_text else None
        if eos is not None:
            ids.add(eos)
        return frozenset(ids)

    def bos_token_id(self) -> int | None:
        if self.bos_text:
            return self.token_id(self.bos_text)
        bos = self.config.get("bos_token_id")
        return bos if isinstance(bos, int) else None

    def adds_bos(self) -> bool:
        """Whether encoding prepends BOS: tokenizer_config's add_bos_token when it says, else
        whether tokenizer.json's post-processor starts a single sequence with a special token."""
        flag = self.tokenizer_config.get("add_bos_token")
        if isinstance(flag, bool):
            return flag
        for step in _processors(self.tokenizer_json.get("post_processor")):
            if step.get("type") == "TemplateProcessing":
                single = step.get("single") or []
                return bool(single) and "SpecialToken" in single[0]
            if step.get("type") in ("BertProcessing", "RobertaProcessing"):
                return True
        return False

    def template_text(self) -> TemplateText:
        """The chat template of `chat_template.jinja` (newer saves) or tokenizer_config.json's
        chat_template (a string, or a list of named templates of which "default" is used), None
        when neither has one, and the BOS and EOS texts."""
        source: Any = None
        jinja = self.path / "chat_template.jinja"
        if jinja.is_file():
            source = jinja.read_text(encoding="utf-8")
        else:
            source = self.tokenizer_config.get("chat_template")
            if isinstance(source, list):
                named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
                source = named.get("default")
        if not isinstance(source, str) or not source.strip():
            source = None
        return TemplateText(source, bos_token=self.bos_text, eos_token=self.eos_text)


def _processors(post_processor: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    if not post_processor:
        return
    if post_processor.get("type") == "Sequence":
        for inner in post_processor.get("processors", []):
            yield from _processors(inner)
    else:
        yield post_processor
