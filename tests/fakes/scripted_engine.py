"""A scripted engine: byte-level tokens, a fixed answer. It exercises the engine contract and
the streaming core without a model, so conformance tests also run on it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from llmflow.engines.base import Engine, TokenRequest
from llmflow.streaming.detokenizer import ByteDetokenizer, Detokenizer
from llmflow.types import TemplateText

EOS = 256
ANSWER = "大阪城は有名です。Osaka Castle is famous 🏯. It was built in 1583. <|im_end|>"
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ScriptedEngine(Engine):
    """Answers ANSWER's bytes one token each at temperature 0, a seeded shuffle of them otherwise,
    then EOS. Records how many tokens it produced, for cancellation tests."""

    name: ClassVar[str] = "scripted"

    def __init__(self, answer: str = ANSWER, n_ctx: int = 512):
        self._answer = answer.encode()
        self._n_ctx = n_ctx
        self.tokens_generated = 0

    @classmethod
    def load(cls, model_path: str | Path, **options: Any) -> ScriptedEngine:
        return cls(**options)

    model_name = "scripted"
    max_concurrency = 1

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS})

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return list(text.encode())

    @property
    def n_vocab(self) -> int:
        return EOS + 1

    def token_piece(self, token_id: int) -> bytes:
        return b"<|im_end|>" if token_id == EOS else bytes([token_id])

    def template_text(self) -> TemplateText:
        return TemplateText(TEMPLATE)

    def detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(lambda t: b"" if t == EOS else bytes([t]))

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        answer = list(self._answer)
        if not request.params.greedy:
            random.Random(request.params.seed).shuffle(answer)
        for token in [*answer, EOS][: request.limit]:
            if request.cancel.cancelled:
                return
            self.tokens_generated += 1
            yield token

    def close(self) -> None:
        pass
