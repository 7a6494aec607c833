"""OpenAI's wire formats: chat and text completions, streamed (`StreamFormat`, a `WireFormat` of
llmflow chunks) or whole. Stream chunks are built from pre-encoded prefix and suffix bytes, so a
token costs one `json.dumps` of its text."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from llmflow.choices import ChoiceChunk
from llmflow.observability import RequestTimings
from llmflow.server.error_answers import sse_error_event
from llmflow.server.openai_logprobs import TextLogprobs, chat_logprobs
from llmflow.server.pipeline import ChunkFormat, ToolItems
from llmflow.tools import ToolCallChunk
from llmflow.types import Chunk, Completion, FinishReason, ToolCall, Usage


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: the placeholder text `StreamFormat` splits its per-token events around
_TEXT = "\x00text\x00"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class StreamFormat(ChunkFormat):
    """The chunks of one streamed answer, chat (`chat.completion.chunk`, text in `delta.content`)
    or text completion (`text_completion`, text in `text`): role chunk (chat), text deltas, finish
    chunk, usage chunk (with `include_usage`). With `with_timings` (llmflow's extension) the last
    chunk carries the request's `timings`."""

    def __init__(
        self,
        *,
        chat: bool,
        model: str,
        include_usage: bool,
        with_timings: bool = False,
        with_logprobs: bool = False,
        n: int = 1,
    ):
        self.chat = chat
        self.include_usage = include_usage
        self.with_timings = with_timings
        self.with_logprobs = with_logprobs
        self.n = n
        self._text_logprobs = [TextLogprobs() for _ in range(n)]
        #: the choices that called functions: they finish with `tool_calls`
        self._called: set[int] = set()
        self._head = {
            "id": new_id("chatcmpl" if chat else "cmpl"),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        # a text chunk's event is the event of a placeholder text, split around it
        placeholder = self._event(self._choice({"content": _TEXT} if chat else _TEXT, None))
        self._prefix, _, self._suffix = placeholder.rpartition(_dumps(_TEXT).encode())
        # a reasoning model's thinking, under both names clients read (llama.cpp's and vLLM's)
        self._thinking_prefix = self._prefix.replace(b'"delta":{"content":', b'"delta":{"reasoning_content":')

    # -- WireFormat[Chunk] ----------------------------------------------------------------------
    def opening(self) -> bytes:
        return self.role() if self.chat else b""

    def item(self, chunk: Chunk) -> bytes:
        """The per-token path."""
        if chunk.logprobs:
            return self._scored(chunk)
        if chunk.reasoning:
            thinking = json.dumps(chunk.reasoning, ensure_ascii=False).encode()
            return self._thinking_prefix + thinking + b',"reasoning":' + thinking + self._suffix
        return self._prefix + json.dumps(chunk.text, ensure_ascii=False).encode() + self._suffix

    def final(self, item: Any, final: Chunk, timings: RequestTimings) -> bytes:
        """The finish chunk, and the usage chunk with `include_usage`; the last carries `timings`
        when asked for."""
        extra = {"timings": timings.to_dict()} if self.with_timings else None
        index = self._index(item)
        assert final.finish_reason is not None
        reason = self._reason(index, final.finish_reason)
        if not self.include_usage or final.usage is None:
            return self.finish(reason, extra, index)
        return self.finish(reason, index=index) + self.usage(final.usage, extra)

    def _reason(self, index: int, reason: FinishReason) -> str:
        return tool_calls_reason(reason) if index in self._called else reason.value

    @staticmethod
    def _index(item: Any) -> int:
        return 0

    @staticmethod
    def error(error: Exception) -> bytes:
        return sse_error_event(error)

    def answer(
        self,
        completions: list[Completion],
        timings: RequestTimings,
        *,
        splits: Sequence[tuple[str, Sequence[ToolCall]]] | None = None,
    ) -> dict[str, Any]:
        """The whole answer, not streamed: `chat.completion` (text in `message`) or
        `text_completion`, a choice per completion (all carry the usage of all). `splits`: each
        completion's (text, function calls), split from its text by the caller; a choice with
        calls has `message.tool_calls` and finish reason `tool_calls`."""
        answer: dict[str, Any] = {
            "id": new_id("chatcmpl" if self.chat else "cmpl"),
            "object": "chat.completion" if self.chat else "text_completion",
            "created": int(time.time()),
            "model": self._head["model"],
            "choices": [
                self._whole_choice(i, c, *(splits[i] if splits is not None else (None, ())))
                for i, c in enumerate(completions)
            ],
            "usage": completions[0].usage.to_dict(),
        }
        if self.with_timings:
            answer["timings"] = timings.to_dict()
        return answer

    def _whole_choice(
        self,
        index: int,
        completion: Completion,
        content: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index}
        text = completion.text if content is None else content
        reason = completion.finish_reason.value
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
            if completion.reasoning:
                choice["message"].update(
                    reasoning_content=completion.reasoning, reasoning=completion.reasoning
                )
            if tool_calls:
                choice["message"].update(
                    content=text or None, tool_calls=[call.to_openai() for call in tool_calls]
                )
                reason = tool_calls_reason(completion.finish_reason)
        else:
            choice["text"] = text
        logprobs = None
        if self.with_logprobs:
            entries = completion.logprobs
            logprobs = chat_logprobs(entries) if self.chat else TextLogprobs()(entries)
        choice.update(logprobs=logprobs, finish_reason=reason)
        return choice

    def _scored(self, chunk: Chunk, index: int = 0) -> bytes:
        """A chunk built as a dict: with its tokens' logprobs (asked for: off the plain
        per-token path), or of choice `index`."""
        if not self.chat:
            logprobs = self._text_logprobs[index](chunk.logprobs) if self.with_logprobs else None
            return self._event(self._choice(chunk.text, None, logprobs, index))
        delta = {"content": chunk.text}
        if chunk.reasoning:
            delta = {"reasoning_content": chunk.reasoning, "reasoning": chunk.reasoning}
        logprobs = chat_logprobs(chunk.logprobs) if self.with_logprobs else None
        return self._event(self._choice(delta, None, logprobs, index))

    def _call(self, item: ToolCallChunk, index: int = 0) -> bytes:
        """A piece of a function call, as OpenAI streams `delta.tool_calls[i]`: `id`, `type` and
        `function.name` first, then `function.arguments` in pieces."""
        call: dict[str, Any] = {"index": item.index}
        if item.id is not None:
            call.update(
                id=item.id, type="function", function={"name": item.name, "arguments": item.arguments}
            )
        else:
            call["function"] = {"arguments": item.arguments}
        return self._event(self._choice({"tool_calls": [call]}, None, index=index))

    # -- events ------------------------------------------------------------------------------------
    def role(self, index: int = 0) -> bytes:
        return self._event(self._choice({"role": "assistant", "content": ""}, None, index=index))

    def finish(self, reason: str, extra: dict[str, Any] | None = None, index: int = 0) -> bytes:
        """The chunk with the finish reason (its wire string: `tool_calls` included); `extra` keys
        (llmflow's `timings`) added at the top."""
        body = self._choice({} if self.chat else "", reason, index=index)
        return self._event({**body, **extra} if extra else body)

    def usage(self, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        return self._event({**self._head, "choices": [], "usage": usage.to_dict(), **(extra or {})})

    def _choice(
        self, delta: Any, finish_reason: str | None, logprobs: Any = None, index: int = 0
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index}
        choice["delta" if self.chat else "text"] = delta
        choice["logprobs"] = logprobs
        choice["finish_reason"] = finish_reason
        body: dict[str, Any] = {**self._head, "choices": [choice]}
        if self.include_usage:
            body["usage"] = None
        return body

    @staticmethod
    def _event(body: dict[str, Any]) -> bytes:
        return b"data: " + _dumps(body).encode() + b"\n\n"


def tool_calls_reason(reason: FinishReason) -> str:
    """An answer that called functions and ended by itself finishes with `tool_calls`."""
    return "tool_calls" if reason is FinishReason.STOP else reason.value


class ChoicesFormat(StreamFormat):
    """`StreamFormat` for n > 1 answers to one request (a `WireFormat` of `ChoiceChunk`s): each
    event names its choice's `index`; a choice's end is its finish chunk; the last one to end
    brings the usage chunk (with `include_usage`). A choice's items may be function call pieces
    (`ToolCallChunk`, with tools): that choice then finishes with `tool_calls`."""

    def opening(self) -> bytes:
        return b"".join(self.role(i) for i in range(self.n)) if self.chat else b""

    @staticmethod
    def final_of(item: ChoiceChunk) -> Chunk | None:
        chunk = item.chunk
        return chunk if isinstance(chunk, Chunk) and chunk.usage is not None else None

    @staticmethod
    def text_of(item: ChoiceChunk) -> str:
        chunk = item.chunk
        return chunk.text if isinstance(chunk, Chunk) else chunk.arguments

    def item(self, item: ChoiceChunk) -> bytes:  # type: ignore[override]
        chunk = item.chunk
        if isinstance(chunk, ToolCallChunk):
            self._called.add(item.index)
            return self._call(chunk, item.index)
        if chunk.finish_reason is not None:
            return self.finish(self._reason(item.index, chunk.finish_reason), index=item.index)
        return self._scored(chunk, item.index)

    @staticmethod
    def _index(item: ChoiceChunk) -> int:
        return item.index


class ToolStreamFormat(ToolItems, StreamFormat):
    """A chat stream whose items are text chunks and function call pieces (`ToolCallChunk`):
    calls go out as OpenAI streams them, `delta.tool_calls[i]` with `id`, `type` and
    `function.name` first, then `function.arguments` in pieces; the finish reason is
    `tool_calls` when the answer called functions."""

    def item(self, item: Chunk | ToolCallChunk) -> bytes:  # type: ignore[override]
        if isinstance(item, Chunk):
            return super().item(item)
        self._called.add(0)
        return self._call(item)


def model_list(names: list[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(name, created) for name in names]}


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "llmflow"}
