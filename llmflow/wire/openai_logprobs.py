"""Logprobs in OpenAI's shapes: chat's `{"content": [{token, logprob, bytes, top_logprobs}]}`
and the legacy completions' `{tokens, token_logprobs, top_logprobs, text_offset}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmflow.types import TokenLogprob


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    return {"content": [t.to_dict() for t in entries], "refusal": None}


class TextLogprobs:
    """The completions shape for one answer's chunks in turn: `text_offset` counts on across
    calls (characters into the answer)."""

    def __init__(self) -> None:
        self._offset = 0

    def __call__(self, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        offsets = []
        for t in entries:
            offsets.append(self._offset)
            self._offset += len(t.token)
        return {
            "tokens": [t.token for t in entries],
            "token_logprobs": [t.logprob for t in entries],
            "top_logprobs": [{a.token: a.logprob for a in t.top} for t in entries],
            "text_offset": offsets,
        }
