"""What one benchmark request is (`RequestSpec`) and what was measured for it (`RequestRecord`).

Times are `time.perf_counter()` readings; they become seconds relative to the request's
start only when a record is reported, so the hot path just appends floats.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ErrorKind(str, enum.Enum):
    """Why a request failed; the values are the `error.kind` strings of the JSON results."""

    INVALID_URL = "invalid_url"  # the URL cannot be requested at all
    CONNECT = "connect"  # nothing answers: server down, unknown host, refused
    TIMEOUT = "timeout"  # no byte for `timeout` seconds
    HTTP_STATUS = "http_status"  # a non-2xx answer
    NOT_STREAMING = "not_streaming"  # one JSON body instead of an SSE stream
    MALFORMED_SSE = "malformed_sse"  # a line or event that is not SSE / not a JSON chunk
    STREAM_ERROR = "stream_error"  # the server sent an error event after streaming began
    INCOMPLETE = "incomplete"  # the stream ended before a finish_reason or [DONE]
    ENGINE = "engine"  # in-process: the model raised


class OutputTokenSource(str, enum.Enum):
    """Where a request's output token count came from, best first."""

    USAGE = "usage"  # the server's own count (`usage.completion_tokens`)
    TOKENIZER = "tokenizer"  # the answer's text re-tokenized with the model's tokenizer
    CHUNKS = "chunks"  # neither was available: one token per content chunk (a lower bound)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload: a prompt (plain completion) or a conversation (chat)."""

    index: int
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_tokens: int = 128
    #: tokens in the prompt text as counted when the workload was built (None: not counted)
    prompt_tokens: int | None = None

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def as_prompt(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.get("content", "") for m in self.messages or ())


@dataclass(frozen=True, slots=True)
class RequestError:
    kind: ErrorKind
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


@dataclass(slots=True)
class RequestRecord:
    """Measurements of one request, filled in while it streams.

    `arrivals` holds the arrival time of every chunk that carried text (empty chunks,
    role-only chunks, keep-alives and the usage chunk are not arrivals).
    """

    index: int
    sent_at: float = 0.0
    ended_at: float | None = None
    arrivals: list[float] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage_prompt_tokens: int | None = None
    usage_output_tokens: int | None = None
    tokenizer_output_tokens: int | None = None
    spec_prompt_tokens: int | None = None
    error: RequestError | None = None
    #: sent a second time because the server closed the connection without answering the first
    resent: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def ttft_s(self) -> float | None:
        return self.arrivals[0] - self.sent_at if self.arrivals else None

    @property
    def itl_s(self) -> list[float]:
        """Gaps between consecutive text chunks (one per chunk after the first, like vLLM)."""
        a = self.arrivals
        return [a[i] - a[i - 1] for i in range(1, len(a))]

    @property
    def e2e_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.sent_at

    @property
    def output_tokens(self) -> tuple[int | None, OutputTokenSource | None]:
        if self.usage_output_tokens is not None:
            return self.usage_output_tokens, OutputTokenSource.USAGE
        if self.tokenizer_output_tokens is not None:
            return self.tokenizer_output_tokens, OutputTokenSource.TOKENIZER
        if self.arrivals:
            return len(self.arrivals), OutputTokenSource.CHUNKS
        if self.ok and self.ended_at is not None:
            return 0, OutputTokenSource.CHUNKS
        return None, None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (E2E - TTFT) / (tokens - 1), as vLLM defines it."""
        tokens, _ = self.output_tokens
        ttft, e2e = self.ttft_s, self.e2e_s
        if tokens is None or tokens < 2 or ttft is None or e2e is None:
            return None
        return (e2e - ttft) / (tokens - 1)

    def fail(self, kind: ErrorKind, message: str) -> None:
        self.error = RequestError(kind, message)

    def to_dict(self, level_start: float) -> dict[str, Any]:
        """The record as in the JSON results (see `llmflow.bench.schema`)."""
        tokens, source = self.output_tokens
        prompt_tokens = self.usage_prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = self.spec_prompt_tokens
        return {
            "index": self.index,
            "ok": self.ok,
            "start_s": _round(self.sent_at - level_start),
            "ttft_s": _round(self.ttft_s),
            "e2e_s": _round(self.e2e_s),
            "tpot_s": _round(self.tpot_s),
            "itl_s": [_round(gap) for gap in self.itl_s],
            "chunks": len(self.arrivals),
            "output_tokens": tokens,
            "output_tokens_source": source.value if source else None,
            "usage_output_tokens": self.usage_output_tokens,
            "tokenizer_output_tokens": self.tokenizer_output_tokens,
            "prompt_tokens": prompt_tokens,
            "finish_reason": self.finish_reason,
            "error": self.error.to_dict() if self.error else None,
            "resent": self.resent,
        }


def _round(value: float | None) -> float | None:
    """Microsecond resolution is plenty and keeps the JSON readable."""
    return None if value is None else round(value, 6)
