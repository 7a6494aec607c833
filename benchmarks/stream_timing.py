"""The one-stream timing every in-process benchmark takes of `LLM.stream(..., raw=True)`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any


def time_stream(start_stream: Callable[[], Iterable[Any]]) -> tuple[float, float, int]:
    """Start a raw chunk stream and read it to the end: (TTFT in s, decode tokens/s after the
    first token, tokens generated as the final chunk's usage counts them)."""
    start = time.perf_counter()
    first = None
    tokens = 0
    for chunk in start_stream():
        if chunk.is_final:
            tokens = chunk.usage.completion_tokens
        elif first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return first - start, (tokens - 1) / (end - first), tokens
