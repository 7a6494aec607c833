"""OpenAI's wire formats: chat and text completions, streamed (`StreamFormat`, a `WireFormat` of
llmflow chunks) or whole. Stream chunks are built from pre-encoded prefix and suffix bytes, so a
token costs one `json.dumps` of its text."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from llmflow.observability import RequestTimings
from llmflow.server.error_answers import sse_error_event
from llmflow.server.pipeline import ChunkFormat
from llmflow.tools import ToolCallChunk
from llmflow.types import Chunk, Completion, FinishReason, ToolCall, Usage


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def finish_reason_value(reason: FinishReason | None) -> str | None:
    return None if reason is None else reason.value


class StreamFormat(ChunkFormat):
    """The chunks of one streamed answer, chat (`chat.completion.chunk`, text in `delta.content`)
    or text completion (`text_completion`, text in `text`): role chunk (chat), text deltas, finish
    chunk, usage chunk (with `include_usage`). With `with_timings` (llmflow's extension) the last
    chunk carries the request's `timings`."""

    def __init__(self, *, chat: bool, model: str, include_usage: bool, with_timings: bool = False):
        self.chat = chat
        self.include_usage = include_usage
        self.with_timings = with_timings
        self._head = {
            "id": new_id("chatcmpl" if chat else "cmpl"),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        usage_tail = ',"usage":null' if include_usage else ""
        if chat:
            prefix = _dumps(self._head)[:-1] + ',"choices":[{"index":0,"delta":{"content":'
            suffix = '},"logprobs":null,"finish_reason":null}]' + usage_tail + "}"
        else:
            prefix = _dumps(self._head)[:-1] + ',"choices":[{"index":0,"text":'
            suffix = ',"logprobs":null,"finish_reason":null}]' + usage_tail + "}"
        self._prefix = b"data: " + prefix.encode()
        self._suffix = suffix.encode() + b"\n\n"

    # -- WireFormat[Chunk] ----------------------------------------------------------------------
    def opening(self) -> bytes:
        return self.role() if self.chat else b""

    def item(self, chunk: Chunk) -> bytes:
        """The per-token path."""
        return self._prefix + json.dumps(chunk.text, ensure_ascii=False).encode() + self._suffix

    def final(self, chunk: Chunk, final: Chunk, timings: RequestTimings) -> bytes:
        extra = {"timings": timings.to_dict()} if self.with_timings else None
        reason = finish_reason_value(final.finish_reason)
        if not self.include_usage or final.usage is None:
            return self.finish(reason, extra)
        return self.finish(reason) + self.usage(final.usage, extra)

    @staticmethod
    def error(error: Exception) -> bytes:
        return sse_error_event(error)

    def answer(
        self,
        completion: Completion,
        timings: RequestTimings,
        *,
        content: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
    ) -> dict[str, Any]:
        """The whole answer, not streamed: `chat.completion` (text in `message`) or `text_completion`.
        With `tool_calls` (split from the text by the caller), `message.tool_calls` and finish
        reason `tool_calls`."""
        choice: dict[str, Any] = {"index": 0}
        text = completion.text if content is None else content
        reason = completion.finish_reason.value
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            if tool_calls:
                choice["message"] = {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [call.to_openai() for call in tool_calls],
                }
                reason = tool_calls_reason(completion.finish_reason)
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=reason)
        answer: dict[str, Any] = {
            "id": new_id("chatcmpl" if self.chat else "cmpl"),
            "object": "chat.completion" if self.chat else "text_completion",
            "created": int(time.time()),
            "model": self._head["model"],
            "choices": [choice],
            "usage": completion.usage.to_dict(),
        }
        if self.with_timings:
            answer["timings"] = timings.to_dict()
        return answer

    # -- events ------------------------------------------------------------------------------------
    def role(self) -> bytes:
        return self._event(self._choice({"role": "assistant", "content": ""}, None))

    def finish(self, reason: str | None, extra: dict[str, Any] | None = None) -> bytes:
        """The chunk with the finish reason (its wire string); `extra` keys (llmflow's `timings`)
        added at the top."""
        body = self._choice({} if self.chat else "", reason)
        return self._event({**body, **extra} if extra else body)

    def usage(self, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        return self._event({**self._head, "choices": [], "usage": usage.to_dict(), **(extra or {})})

    def _choice(self, delta: Any, finish_reason: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        choice["delta" if self.chat else "text"] = delta
        choice["logprobs"] = None
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


class ToolStreamFormat(StreamFormat):
    """A chat stream whose items are text chunks and function call pieces (`ToolCallChunk`):
    calls go out as OpenAI streams them, `delta.tool_calls[i]` with `id`, `type` and
    `function.name` first, then `function.arguments` in pieces; the finish reason is
    `tool_calls` when the answer called functions."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._called = False

    @staticmethod
    def final_of(item: Chunk | ToolCallChunk) -> Chunk | None:  # type: ignore[override]
        return item if isinstance(item, Chunk) and item.finish_reason is not None else None

    @staticmethod
    def text_of(item: Chunk | ToolCallChunk) -> str:  # type: ignore[override]
        return item.text if isinstance(item, Chunk) else item.arguments

    def item(self, item: Chunk | ToolCallChunk) -> bytes:  # type: ignore[override]
        if isinstance(item, Chunk):
            return super().item(item)
        self._called = True
        call: dict[str, Any] = {"index": item.index}
        if item.id is not None:
            call.update(
                id=item.id, type="function", function={"name": item.name, "arguments": item.arguments}
            )
        else:
            call["function"] = {"arguments": item.arguments}
        return self._event(self._choice({"tool_calls": [call]}, None))

    def final(self, chunk: Chunk, final: Chunk, timings: RequestTimings) -> bytes:
        extra = {"timings": timings.to_dict()} if self.with_timings else None
        assert final.finish_reason is not None
        reason = tool_calls_reason(final.finish_reason) if self._called else final.finish_reason.value
        if not self.include_usage or final.usage is None:
            return self.finish(reason, extra)
        return self.finish(reason) + self.usage(final.usage, extra)


def model_list(name: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(name, created)]}


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "llmflow"}
