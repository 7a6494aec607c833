"""Plain data that crosses llmflow's internal boundaries. No third-party imports here."""

from __future__ import annotations

import enum
import threading
from contextvars import ContextVar
from dataclasses import dataclass


class FinishReason(str, enum.Enum):
    """Why a generation ended; the values are the OpenAI wire strings."""

    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens reached or the context window is full
    CANCELLED = "cancelled"  # the consumer closed the stream or called cancel()


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a stream.

    Text chunks carry non-empty `text` and no finish data. The last chunk of every stream has
    `text == ""`, a `finish_reason` and `usage`; nothing follows it.
    """

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None

    @property
    def is_final(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole answer, as returned by the non-streaming calls."""

    text: str
    finish_reason: FinishReason
    usage: Usage


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the model made: `arguments` is JSON text, as the model wrote it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, object]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str
    #: an assistant message's calls
    tool_calls: tuple[ToolCall, ...] = ()
    #: a tool message: the call it answers
    tool_call_id: str | None = None


class CancelToken:
    """A flag another thread can raise to stop a generation between two tokens."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


#: The cancel token of the request this thread is answering, for calls that cannot take one: a
#: server running a whole MLflow `predict` for a client sets it, and `LLM.stream` uses it when it
#: is given none, so a client that leaves stops every row's generation.
current_cancel: ContextVar[CancelToken | None] = ContextVar("llmflow_current_cancel", default=None)
