"""OpenAI's chat and text completions on the wire: a generation's events as
`chat.completion.chunk` / `text_completion` SSE events, its record as the whole answer.

One encoder per request (it numbers nothing, but it remembers which choices have ended). Text
events are built from pre-encoded prefix and suffix bytes, so a token costs one `json.dumps` of
its text. With `with_timings` (llmflow's extension) the last event, or the whole answer, carries
the request's `timings`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from llmflow.generation import (
    CallDelta,
    ChoiceEnd,
    ChoiceRecord,
    Event,
    Final,
    GenerationRecord,
    Reasoning,
    Text,
)
from llmflow.types import Usage
from llmflow.wire.errors import sse_error_event
from llmflow.wire.openai_logprobs import TextLogprobs, chat_logprobs

#: the placeholder text a text event is split around
_TEXT = "\x00text\x00"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class CompletionsEncoder:
    """Text completions (`text_completion`, text in `choices[i].text`). `n` choices;
    `include_usage`: a last chunk with the usage (`stream_options.include_usage`);
    `response_id` and `created` are made up when not given."""

    chat = False
    object_name = "text_completion"
    id_prefix = "cmpl"

    def __init__(
        self,
        *,
        model: str,
        n: int = 1,
        include_usage: bool = False,
        with_timings: bool = False,
        with_logprobs: bool = False,
        response_id: str | None = None,
        created: int | None = None,
    ):
        self.model = model
        self.n = n
        self.include_usage = include_usage
        self.with_timings = with_timings
        self.with_logprobs = with_logprobs
        self._head = {
            "id": response_id or new_id(self.id_prefix),
            "object": self.object_name,
            "created": int(time.time()) if created is None else created,
            "model": model,
        }
        self._ended = 0
        self._last_end: ChoiceEnd | None = None
        self._text_logprobs = [TextLogprobs() for _ in range(n)]
        placeholder = self._event(self._choice(self._delta(_TEXT), None))
        self._prefix, _, self._suffix = placeholder.rpartition(_dumps(_TEXT).encode())

    # -- a stream ----------------------------------------------------------------------------------
    def opening(self) -> bytes:
        return b""

    def event(self, event: Event) -> bytes:
        """The bytes of one event (b"" for none). The per-token path is the first test."""
        kind = type(event)
        if kind is Text and event.choice == 0 and not event.logprobs:  # type: ignore[union-attr]
            return self._prefix + json.dumps(event.text, ensure_ascii=False).encode() + self._suffix  # type: ignore[union-attr]
        if kind is Text or kind is Reasoning:
            return self._text_event(event)  # type: ignore[arg-type]
        if kind is CallDelta:
            return self._call(event)  # type: ignore[arg-type]
        if kind is ChoiceEnd:
            return self._choice_end(event)  # type: ignore[arg-type]
        if kind is Final:
            return self._final(event.record)  # type: ignore[union-attr]
        raise TypeError(f"not a generation event: {event!r}")

    @staticmethod
    def error(error: BaseException) -> bytes:
        return sse_error_event(error)

    def _text_event(self, event: Text | Reasoning) -> bytes:
        logprobs = self._text_logprobs[event.choice](event.logprobs) if self.with_logprobs else None
        return self._event(self._choice(event.text, None, logprobs, event.choice))

    def _call(self, event: CallDelta) -> bytes:
        raise TypeError("a text completion has no function calls")

    def _choice_end(self, end: ChoiceEnd) -> bytes:
        """A choice's finish chunk; the last choice's waits for the final event (it may carry
        the timings)."""
        self._ended += 1
        if self._ended < self.n:
            return self.finish(end.finish, index=end.choice)
        self._last_end = end
        return b""

    def _final(self, record: GenerationRecord) -> bytes:
        """The last finish chunk, and the usage chunk with `include_usage`; the last of them
        carries the timings when asked for."""
        end = self._last_end
        assert end is not None
        extra = {"timings": record.timings.to_dict()} if self.with_timings else None
        if not self.include_usage or record.usage is None:
            return self.finish(end.finish, extra, end.choice)
        return self.finish(end.finish, index=end.choice) + self.usage(record.usage, extra)

    # -- the whole answer ---------------------------------------------------------------------------
    def whole(self, record: GenerationRecord) -> dict[str, Any]:
        """The answer not streamed: a choice per record choice; all carry the usage of all."""
        answer: dict[str, Any] = {
            "id": self._head["id"],
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self._head["created"],
            "model": self.model,
            "choices": [self._whole_choice(choice) for choice in record.choices],
            "usage": (record.usage or Usage(0, 0)).to_dict(),
        }
        if self.with_timings:
            answer["timings"] = record.timings.to_dict()
        return answer

    def _whole_choice(self, choice: ChoiceRecord) -> dict[str, Any]:
        logprobs = TextLogprobs()(choice.logprobs) if self.with_logprobs else None
        return {
            "index": choice.index,
            "text": choice.text,
            "logprobs": logprobs,
            "finish_reason": choice.finish,
        }

    # -- events ---------------------------------------------------------------------------------------
    def finish(self, reason: str, extra: dict[str, Any] | None = None, index: int = 0) -> bytes:
        """The chunk with the finish reason; `extra` keys (llmflow's `timings`) at the top."""
        body = self._choice(self._delta(None), reason, index=index)
        return self._event({**body, **extra} if extra else body)

    def usage(self, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        return self._event({**self._head, "choices": [], "usage": usage.to_dict(), **(extra or {})})

    def _delta(self, text: str | None) -> Any:
        """A choice's new text as this format writes it; None: a finish chunk's."""
        return "" if text is None else text

    def _choice(
        self, delta: Any, finish_reason: str | None, logprobs: Any = None, index: int = 0
    ) -> dict[str, Any]:
        key = "delta" if self.chat else "text"
        choice: dict[str, Any] = {
            "index": index,
            key: delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }
        body: dict[str, Any] = {**self._head, "choices": [choice]}
        if self.include_usage:
            body["usage"] = None
        return body

    @staticmethod
    def _event(body: dict[str, Any]) -> bytes:
        return b"data: " + _dumps(body).encode() + b"\n\n"


class ChatEncoder(CompletionsEncoder):
    """Chat completions (`chat.completion.chunk`, text in `delta.content`): a role chunk per
    choice first; a reasoning model's thinking under both names clients read
    (`reasoning_content`, llama.cpp's and vLLM's `reasoning`); function calls as
    `delta.tool_calls[i]`, `id`, `type` and `function.name` first, then `function.arguments` in
    pieces."""

    chat = True
    object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def opening(self) -> bytes:
        return b"".join(self.role(i) for i in range(self.n))

    def role(self, index: int = 0) -> bytes:
        return self._event(self._choice({"role": "assistant", "content": ""}, None, index=index))

    def _delta(self, text: str | None) -> Any:
        return {} if text is None else {"content": text}

    def _text_event(self, event: Text | Reasoning) -> bytes:
        delta: dict[str, Any]
        if type(event) is Reasoning:
            delta = {"reasoning_content": event.text, "reasoning": event.text}
        else:
            delta = {"content": event.text}
        logprobs = chat_logprobs(event.logprobs) if self.with_logprobs else None
        return self._event(self._choice(delta, None, logprobs, event.choice))

    def _call(self, event: CallDelta) -> bytes:
        call: dict[str, Any] = {"index": event.index}
        if event.id is not None:
            call.update(
                id=event.id, type="function", function={"name": event.name, "arguments": event.arguments}
            )
        else:
            call["function"] = {"arguments": event.arguments}
        return self._event(self._choice({"tool_calls": [call]}, None, index=event.choice))

    def _whole_choice(self, choice: ChoiceRecord) -> dict[str, Any]:
        text = choice.text
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
        if choice.reasoning:
            message.update(reasoning_content=choice.reasoning, reasoning=choice.reasoning)
        if choice.calls:
            message.update(content=text or None, tool_calls=[call.to_openai() for call in choice.calls])
        logprobs = chat_logprobs(choice.logprobs) if self.with_logprobs else None
        return {
            "index": choice.index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": choice.finish,
        }


def model_list(
    names: list[str], created: int, modalities: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Any]:
    """`modalities`: the input modalities of the models loaded, by name (see `model_card`)."""
    known = modalities or {}
    return {"object": "list", "data": [model_card(name, created, known.get(name)) for name in names]}


def model_card(name: str, created: int, modalities: Sequence[str] | None = None) -> dict[str, Any]:
    """OpenAI's model object; llmflow adds `input_modalities` (OpenRouter's name: `text`,
    `image`) once the model is loaded and its engine can say."""
    card: dict[str, Any] = {"id": name, "object": "model", "created": created, "owned_by": "llmflow"}
    if modalities is not None:
        card["input_modalities"] = list(modalities)
    return card
