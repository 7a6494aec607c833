"""Plain data that crosses llmflow's internal boundaries. No third-party imports here."""

from __future__ import annotations

import enum
import hashlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


class FinishReason(str, enum.Enum):
    """Why a generation ended; the values are the OpenAI wire strings."""

    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens reached or the context window is full
    CANCELLED = "cancelled"  # the consumer closed the stream or called cancel()


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    #: prompt tokens whose KV state came from a cache instead of being computed (of `prompt_tokens`):
    #: how an answer was computed, not what it is, so two usages compare equal without it
    cached_tokens: int = field(default=0, compare=False)
    #: speculative decoding's draft tokens verified for this answer, and of them those taken
    #: (the same tokens either way, hence not compared either)
    draft_tokens: int = field(default=0, compare=False)
    accepted_draft_tokens: int = field(default=0, compare=False)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        """As OpenAI's APIs count it (and MLflow's chunks and traces repeat it)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


class PromptReuse:
    """What an engine reports of how it computed one generation (read for its usage): how many
    prompt tokens it took from a cache instead of computing them (set when the generation
    starts), and the draft tokens speculative decoding verified and took (counted as it goes)."""

    __slots__ = ("cached_tokens", "draft_tokens", "accepted_draft_tokens")

    def __init__(self) -> None:
        self.cached_tokens = 0
        self.draft_tokens = 0
        self.accepted_draft_tokens = 0

    def add_drafts(self, drafted: int, accepted: int) -> None:
        self.draft_tokens += drafted
        self.accepted_draft_tokens += accepted

    def usage(self, prompt_tokens: int, completion_tokens: int) -> Usage:
        drafts = (self.draft_tokens, self.accepted_draft_tokens)
        return Usage(prompt_tokens, completion_tokens, self.cached_tokens, *drafts)


class ScoredToken(int):
    """A sampled token id that also carries its log-probability and the most likely tokens' (id,
    logprob) pairs, most likely first: what an engine yields instead of a plain id when the
    request asks for logprobs. It is an `int`, so everything that handles ids handles it."""

    logprob: float
    top: tuple[tuple[int, float], ...]

    def __new__(cls, token_id: int, logprob: float, top: tuple[tuple[int, float], ...] = ()) -> ScoredToken:
        scored = super().__new__(cls, token_id)
        scored.logprob = logprob
        scored.top = top
        return scored


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's text, bytes and logprob, with the most likely alternatives."""

    token: str
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """OpenAI's chat shape: token, logprob, bytes (a list of ints), top_logprobs."""
        return {
            "token": self.token,
            "logprob": self.logprob,
            "bytes": list(self.bytes),
            "top_logprobs": [
                {"token": a.token, "logprob": a.logprob, "bytes": list(a.bytes)} for a in self.top
            ],
        }


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a stream.

    Text chunks carry non-empty `text` and no finish data; when a reasoning model's thinking is
    split from its answer (see `llmflow.streaming.reasoning`), a chunk of thinking has empty
    `text` and non-empty `reasoning`. The last chunk of every stream has `text == ""`, a
    `finish_reason` and `usage`; nothing follows it.
    """

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    reasoning: str = ""
    #: the tokens behind this chunk's text, when the request asked for logprobs
    logprobs: tuple[TokenLogprob, ...] = ()
    #: the final chunk of a stream that ended on a stop string: that string
    stop_sequence: str | None = None

    @property
    def is_final(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole answer, as returned by the non-streaming calls."""

    text: str
    finish_reason: FinishReason
    usage: Usage
    #: a reasoning model's thinking, when it was split from the answer
    reasoning: str = ""
    #: every token's logprob, when the request asked for them
    logprobs: tuple[TokenLogprob, ...] = ()
    #: the stop string the answer ended on, if it ended on one
    stop_sequence: str | None = None


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
class TemplateText:
    """What a model's files say about its prompts: its chat template's source (None when they
    carry none) and the text of its BOS and EOS tokens, which a template writes. Engines hand
    this back as plain data; `llmflow.prompts` turns it into a renderer, so no engine renders."""

    source: str | None = None
    bos_token: str = ""
    eos_token: str = ""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An image as a request gave it, not read yet: a data URI's or a base64 block's text, an
    `http(s)` URL, or bytes (`llmflow.media` reads it into an `Image`). `field` names where it was
    given (`messages[0].content[1]`), for every refusal."""

    field: str
    #: a `data:` URI or an `http(s)` URL
    url: str = ""
    #: base64 text given without a URI around it (Anthropic's base64 source)
    base64: str | None = None
    #: the image's bytes as they were given (an MLflow model's `images`, a batch's image column)
    data: bytes | None = field(default=None, repr=False)

    @property
    def is_remote(self) -> bool:
        return self.base64 is None and self.data is None and not self.url.startswith("data:")


@dataclass(frozen=True, slots=True)
class Image:
    """An image read and checked (`llmflow.media`): its bytes, its format as its content says
    (never as the request's MIME type says), its size, and the field it came from."""

    field: str
    data: bytes = field(repr=False)
    #: png, jpeg, webp or gif
    format: str
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


#: one piece of a message's content: text, or an image (read or not yet)
ContentPart = str | ImageRef | Image


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    #: the message's text (with images: its text parts joined)
    content: str
    #: an assistant message's calls
    tool_calls: tuple[ToolCall, ...] = ()
    #: a tool message: the call it answers
    tool_call_id: str | None = None
    #: empty for a message of text alone; else its text and images in their order
    parts: tuple[ContentPart, ...] = ()

    @classmethod
    def of_parts(cls, role: str, parts: list[ContentPart], joiner: str = "") -> Message:
        """A message of `parts`: plain text when it holds no image."""
        text = joiner.join(p for p in parts if isinstance(p, str))
        has_image = any(not isinstance(p, str) for p in parts)
        return cls(role, text, parts=tuple(parts) if has_image else ())

    @property
    def images(self) -> tuple[ImageRef | Image, ...]:
        return tuple(p for p in self.parts if not isinstance(p, str))


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
