"""Timing of one stream: time to first token and decode speed, measured the same way everywhere."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass
class StreamTimer:
    """Wraps a chunk stream and records when text arrived.

    Decode speed counts the tokens after the first one over the time after the first text
    chunk, so prompt processing does not blur it.
    """

    started: float = field(default_factory=time.perf_counter)
    first_text: float | None = None
    finished: float | None = None
    completion_tokens: int = 0

    def watch(self, chunks: Iterable) -> Iterator:
        for chunk in chunks:
            if chunk.is_final:
                self.finished = time.perf_counter()
                self.completion_tokens = chunk.usage.completion_tokens
            elif self.first_text is None:
                self.first_text = time.perf_counter()
            yield chunk

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_text is None else self.first_text - self.started

    @property
    def decode_tokens_per_s(self) -> float | None:
        if self.first_text is None or self.finished is None or self.completion_tokens < 2:
            return None
        elapsed = self.finished - self.first_text
        return (self.completion_tokens - 1) / elapsed if elapsed > 0 else None

    def summary(self) -> str:
        ttft = f"{self.ttft_s * 1000:.0f} ms" if self.ttft_s is not None else "n/a"
        rate = f"{self.decode_tokens_per_s:.1f} tokens/s" if self.decode_tokens_per_s else "n/a"
        return f"time to first token {ttft} · {self.completion_tokens} tokens · {rate}"
