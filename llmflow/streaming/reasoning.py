"""Reasoning models' thinking, split from their answer as the text streams.

A model such as Qwen3, a DeepSeek-R1 distill or SmolLM3 thinks first, between `<think>` and
`</think>`, then answers. Its chat template often writes the opening tag itself at the end of
the prompt; otherwise the model writes it as its first text. `ReasoningSplitter` routes the
thinking to `reasoning` and the rest to `content`, holding back only text that could still
become a tag (a tag may come split across any number of tokens), as `StopMatcher` does for stop
strings. Only a first block is thinking, as llama.cpp's `--reasoning-format` parses it.
"""

from __future__ import annotations

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"

# states
_START = 0  # before any text: an opening tag (after whitespace) may come
_THINKING = 1
_CONTENT = 2


def opens_thinking(prompt: str, open_tag: str = OPEN_TAG) -> bool:
    """Whether a rendered prompt ends inside a thinking block (its template opened one)."""
    return prompt.rstrip().endswith(open_tag)


class ReasoningSplitter:
    """`feed(text)` returns `(reasoning, content)` that are safe to emit now; `flush()` what is
    held at the end (an unclosed block stays thinking). Whitespace right after either tag is
    dropped, as llama.cpp does."""

    __slots__ = ("_state", "_held", "_strip", "_open", "_close")

    def __init__(self, *, thinking: bool = False, open_tag: str = OPEN_TAG, close_tag: str = CLOSE_TAG):
        """`thinking`: the prompt already opened the block."""
        self._state = _THINKING if thinking else _START
        self._strip = thinking  # drop whitespace at the start of the next part
        self._held = ""
        self._open = open_tag
        self._close = close_tag

    @property
    def thinking(self) -> bool:
        return self._state == _THINKING

    def feed(self, text: str) -> tuple[str, str]:
        if self._state == _CONTENT and not self._strip:
            return "", text
        buffer = self._held + text
        self._held = ""
        if self._state == _START:
            return self._start(buffer)
        if self._state == _THINKING:
            return self._thinking(buffer)
        return "", self._strip_start(buffer)

    def flush(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        if self._state == _THINKING:
            return held, ""
        return "", held

    def _start(self, buffer: str) -> tuple[str, str]:
        stripped = buffer.lstrip()
        if stripped.startswith(self._open):
            self._state, self._strip = _THINKING, True
            return self._thinking(stripped[len(self._open) :])
        if not stripped or self._open.startswith(stripped):
            self._held = buffer  # may still become the opening tag
            return "", ""
        self._state = _CONTENT
        return "", buffer

    def _thinking(self, buffer: str) -> tuple[str, str]:
        buffer = self._strip_start(buffer)
        end = buffer.find(self._close)
        if end != -1:
            self._state, self._strip = _CONTENT, True
            return buffer[:end], self._strip_start(buffer[end + len(self._close) :])
        hold = _partial_suffix(buffer, self._close)
        self._held = buffer[len(buffer) - hold :] if hold else ""
        return buffer[: len(buffer) - hold], ""

    def _strip_start(self, text: str) -> str:
        if not self._strip:
            return text
        stripped = text.lstrip()
        if stripped:
            self._strip = False
        return stripped


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
