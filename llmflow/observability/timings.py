"""Timing of one generation: time to first token and decode speed, measured the same way everywhere.

`RequestTimings` is one request's clock readings: the server's latency histograms, the `timings`
object of its responses and of `predict_stream`, MLflow traces and the CLI's summary line all
read the same numbers. Decode speed counts the tokens after the first one over the time after
the first text chunk, so prompt processing does not blur it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from llmflow.types import Usage


@dataclass(slots=True)
class RequestTimings:
    """One request's clock readings (time.perf_counter) and token counts."""

    arrived: float = field(default_factory=time.perf_counter)
    admitted: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished: float | None = None
    #: gaps between consecutive streamed text chunks, in seconds
    inter_token: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: of `prompt_tokens`, those reused from a cache
    cached_tokens: int | None = None
    #: speculative decoding's draft tokens verified, and of them those taken
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    #: stop, length, cancelled, timeout or error
    outcome: str | None = None

    def admit(self) -> None:
        self.admitted = time.perf_counter()

    def token(self) -> None:
        """A text chunk went out. The per-token path: one clock read and one append."""
        now = time.perf_counter()
        last = self.last_token
        if last is None:
            self.first_token = now
        else:
            self.inter_token.append(now - last)
        self.last_token = now

    def finish(self, outcome: str, usage: Usage | None = None) -> None:
        """The generation ended (the first call wins); `usage` from its final chunk, when known."""
        if usage is not None:
            self.prompt_tokens = usage.prompt_tokens
            self.completion_tokens = usage.completion_tokens
            self.cached_tokens = usage.cached_tokens
            self.draft_tokens = usage.draft_tokens
            self.accepted_draft_tokens = usage.accepted_draft_tokens
        if self.finished is None:
            self.finished = time.perf_counter()
            self.outcome = self.outcome or outcome

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.arrived

    @property
    def queue_s(self) -> float | None:
        return None if self.admitted is None else self.admitted - self.arrived

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrived

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.arrived

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first over the time after the first."""
        if self.first_token is None or self.last_token is None or not self.completion_tokens:
            return None
        elapsed = self.last_token - self.first_token
        return (self.completion_tokens - 1) / elapsed if elapsed > 0 and self.completion_tokens > 1 else None

    def to_dict(self) -> dict[str, Any]:
        """Milliseconds, for a response's `timings` object and logs."""

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 3)

        rate = self.decode_tokens_per_s
        return {
            "queue_ms": ms(self.queue_s),
            "ttft_ms": ms(self.ttft_s),
            "e2e_ms": ms(self.e2e_s),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "decode_tokens_per_s": None if rate is None else round(rate, 2),
        }

    def summary(self) -> str:
        """One line for a terminal."""
        ttft = f"{self.ttft_s * 1000:.0f} ms" if self.ttft_s is not None else "n/a"
        rate = f"{self.decode_tokens_per_s:.1f} tokens/s" if self.decode_tokens_per_s else "n/a"
        return f"time to first token {ttft} · {self.completion_tokens or 0} tokens · {rate}"
