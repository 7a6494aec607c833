"""An answer split into text and function calls, as it streams: `tool_stream` turns a stream of
text chunks into text chunks and `ToolCallChunk`s (a call's id and name first, then its
arguments in pieces, as OpenAI streams `delta.tool_calls`); `split_answer` does the same to a
whole answer, with the same splitter, so a streamed call joined equals the whole one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from llmflow.tools.formats import ToolCallFormat
from llmflow.types import Chunk, TokenLogprob, ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """New text of call `index`: `id` and `name` on its first chunk, then `arguments` pieces."""

    index: int
    id: str | None
    name: str | None
    arguments: str


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class AnswerSplitter:
    """Feed the answer's text; get text and call pieces. An answer is text, or opens with the
    format's calls (or a marker written as text); a Hermes answer may write text first and then
    `<tool_call>`."""

    def __init__(self, fmt: ToolCallFormat):
        self._fmt = fmt
        self._scanner = fmt.scanner()
        self._pending = ""
        self._mode = "undecided"  # then "text" or "calls"
        self._ids: dict[int, str] = {}

    def feed(self, text: str) -> list[str | ToolCallChunk]:
        if self._mode == "calls":
            return self._calls(text)
        self._pending += text
        if self._mode == "undecided":
            head = self._pending.lstrip()
            starts = (self._fmt.opener, *self._fmt.markers)
            if not head or (any(s.startswith(head) for s in starts) and not self._fmt.calls_after_text):
                return []
            if any(head.startswith(s) for s in starts) and not self._fmt.calls_after_text:
                self._mode, rest, self._pending = "calls", head, ""
                return self._calls(rest)
            self._mode = "text"
        return self._text()

    def finish(self) -> list[str | ToolCallChunk]:
        """What is still held back, as text."""
        rest, self._pending = self._pending, ""
        return [rest] if rest and self._mode != "calls" else []

    @property
    def calls(self) -> list[ToolCall]:
        """Every call that closed with a name and arguments."""
        done = [c for c in self._scanner.calls if c.complete and c.name is not None]
        return [ToolCall(self._id(c.index), c.name or "", "".join(c.arguments)) for c in done]

    @property
    def opened_calls(self) -> list[ToolCall]:
        """Every call the answer opened with a name, the last possibly cut short."""
        named = [c for c in self._scanner.calls if c.name is not None]
        return [ToolCall(self._id(c.index), c.name or "", "".join(c.arguments)) for c in named]

    @property
    def in_calls(self) -> bool:
        return self._mode == "calls"

    def _text(self) -> list[str | ToolCallChunk]:
        if not self._fmt.calls_after_text:
            out, self._pending = self._pending, ""
            return [out] if out else []
        opener = self._fmt.opener
        at = self._pending.find(opener)
        if at >= 0:
            before, rest = self._pending[:at], self._pending[at:]
            self._mode, self._pending = "calls", ""
            return ([before] if before else []) + self._calls(rest)
        keep = _partial_suffix(self._pending, opener)
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(out) :]
        return [out] if out else []

    def _calls(self, text: str) -> list[str | ToolCallChunk]:
        return [
            ToolCallChunk(d.index, self._id(d.index) if d.name is not None else None, d.name, d.arguments)
            for d in self._scanner.feed(text)
        ]

    def _id(self, index: int) -> str:
        return self._ids.setdefault(index, new_call_id())


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that is a start of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def tool_stream(
    chunks: Iterator[Chunk], fmt: ToolCallFormat, splitter: AnswerSplitter | None = None
) -> Iterator[Chunk | ToolCallChunk]:
    """Text chunks and call pieces, then the stream's final chunk as it was. A reasoning model's
    thinking (`Chunk.reasoning`) passes through as it came; tokens' logprobs go with the next
    text that comes out (held back text keeps them until it does; a call's tokens have none).
    `splitter`: one of the caller's, to read the calls from once the stream has ended."""
    splitter = splitter or AnswerSplitter(fmt)
    logprobs: tuple[TokenLogprob, ...] = ()
    for chunk in chunks:
        if chunk.reasoning and not chunk.text and not chunk.is_final:
            yield chunk
            continue
        logprobs += chunk.logprobs
        pieces = splitter.finish() if chunk.is_final else splitter.feed(chunk.text)
        for piece in pieces:
            if isinstance(piece, str):
                yield Chunk(piece, logprobs=logprobs)
            else:
                yield piece
            logprobs = ()
        if chunk.is_final:
            yield chunk
            return


def split_answer(text: str, fmt: ToolCallFormat) -> tuple[str, list[ToolCall]]:
    """(text, calls) of a whole answer. An answer that opened a call but closed none (cut at
    max_tokens) is returned as text."""
    splitter = AnswerSplitter(fmt)
    pieces = [*splitter.feed(text), *splitter.finish()]
    calls = splitter.calls
    if splitter.in_calls and not calls:
        return text, []
    return "".join(p for p in pieces if isinstance(p, str)), calls
