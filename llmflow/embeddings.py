"""Embeddings of texts or token ids, as OpenAI's /v1/embeddings takes them: checked, tokenized,
pooled by the engine, then cut to `dimensions` and L2-normalised (so a dot product is a cosine).

from llmflow import LLM
llm = LLM.load("bge-small-en-v1.5-q8_0.gguf")
result = embed(llm, ["first text", "second text"])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmflow.errors import InvalidRequest, valid_unicode
from llmflow.llm import LLM, check_token_ids

#: inputs one request may hold (OpenAI's limit)
MAX_INPUTS = 2048

#: a string, a list of strings, a list of token ids, or a list of token-id lists
EmbeddingInput = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]


@dataclass(frozen=True, slots=True)
class Embeddings:
    vectors: list[list[float]]
    #: tokens of every input together
    prompt_tokens: int


def embed(llm: LLM, inputs: EmbeddingInput, *, dimensions: int | None = None) -> Embeddings:
    """Unit vectors, one per input, in order. Bad input raises `InvalidRequest` naming `input`,
    `input[i]` or `dimensions`."""
    token_lists = to_token_lists(llm, inputs)
    vectors = llm.engine.embed(token_lists)
    if dimensions is not None:
        size = len(vectors[0]) if vectors else 0
        if dimensions > size:
            raise InvalidRequest.single("dimensions", f"the model's embeddings have {size} dimensions")
        vectors = [v[:dimensions] for v in vectors]
    return Embeddings([normalized(v) for v in vectors], sum(len(t) for t in token_lists))


def to_token_lists(llm: LLM, inputs: Any) -> list[list[int]]:
    """Every input as token ids: strings tokenized as a prompt is (BOS, and EOS where the model
    wants them: an embedding model's CLS and SEP), ids checked against the vocabulary."""
    if isinstance(inputs, str):
        inputs = [inputs]
    elif inputs and all(isinstance(t, int) and not isinstance(t, bool) for t in inputs):
        inputs = [list(inputs)]
    if not inputs:
        raise InvalidRequest.single("input", "give at least one input")
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest.single("input", f"at most {MAX_INPUTS} inputs per request")
    lists = []
    for i, item in enumerate(inputs):
        field = f"input[{i}]"
        if isinstance(item, str):
            ids = _tokenize(llm, item, field)
        else:
            ids = list(item) if isinstance(item, (list, tuple)) else None
            if ids is None:
                raise InvalidRequest.single(field, "must be a string or a list of token ids")
            check_token_ids(ids, llm.engine.n_vocab, field)
        if not ids:
            raise InvalidRequest.single(field, "is empty")
        lists.append(ids)
    return lists


def normalized(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0:
        return list(vector)
    return [x / norm for x in vector]


def _tokenize(llm: LLM, text: str, field: str) -> list[int]:
    if not text:
        raise InvalidRequest.single(field, "is empty")
    with valid_unicode(field):
        return llm.tokenize(text, add_special=True)
