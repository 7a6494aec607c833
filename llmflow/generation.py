"""One generation object: what a request asks for and the typed events it yields.

`LLM.start(GenerationRequest)` returns a `Generation`: an iterator of events (`Text`, `Reasoning`,
`CallDelta`, `ChoiceEnd`) that ends with `Final(record)`. The request carries the number of
choices and the tool-call format its answers are read in; the choices and the splitting of
function calls from text happen here, once, for every surface. The record (`GenerationRecord`)
is the whole answer: each choice's text, thinking, logprobs, calls and finish, the usage of all,
and the request's timings. Wire encoders (`llmflow.wire`) turn events into bytes and a record
into a whole answer; they decide nothing about the generation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmflow.choices import choice_params, merged_streams
from llmflow.tools.formats import ToolCallFormat
from llmflow.tools.stream import AnswerSplitter, ToolCallChunk, tool_stream
from llmflow.types import (
    CancelToken,
    Chunk,
    Completion,
    FinishReason,
    PromptReuse,
    TokenLogprob,
    ToolCall,
    Usage,
)

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest
    from llmflow.observability.timings import RequestTimings


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A prepared prompt and what to make of it: `n` answers, each read for function calls in
    `calls` (None: the answer is text only)."""

    prepared: PreparedRequest
    n: int = 1
    calls: ToolCallFormat | None = None


# -- events ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Text:
    """Answer text of choice `choice`, with its tokens' logprobs when they were asked for."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()
    choice: int = 0


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A reasoning model's thinking, apart from its answer."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()
    choice: int = 0


@dataclass(frozen=True, slots=True)
class CallDelta:
    """New text of function call `index`: `id` and `name` on its first piece, then `arguments`."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    choice: int = 0


@dataclass(frozen=True, slots=True)
class ChoiceEnd:
    """Choice `choice` ended: its finish (the wire string, `tool_calls` included) and its usage."""

    choice: int
    finish: str
    usage: Usage
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class Final:
    """The generation ended; nothing follows."""

    record: GenerationRecord


Event = Text | Reasoning | CallDelta | ChoiceEnd | Final


def finish_of(reason: FinishReason, calls: list[ToolCall]) -> str:
    """The one rule for a choice's wire finish: an answer that made calls and ended by itself
    finishes with `tool_calls`."""
    return "tool_calls" if calls and reason is FinishReason.STOP else reason.value


# -- the record -----------------------------------------------------------------------------------
@dataclass(slots=True, eq=False)
class ChoiceRecord:
    """One choice, gathered as its events go out."""

    index: int
    #: the answer's text pieces, function calls left out
    parts: list[str] = field(default_factory=list)
    #: everything the model wrote as its answer, calls included (kept only when calls are read)
    written: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    #: the calls that closed with a name and arguments
    calls: list[ToolCall] = field(default_factory=list)
    #: the answer opened calls (complete or not)
    opened_calls: bool = False
    #: every call it opened with a name, the last possibly cut short (at max_tokens)
    all_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    stop_sequence: str | None = None

    @property
    def text(self) -> str:
        """The answer's text; an answer that opened calls but closed none is text as written."""
        if self.opened_calls and not self.calls:
            return "".join(self.written)
        return "".join(self.parts)

    @property
    def answer_text(self) -> str:
        """The text the answer wrote apart from its calls (complete or not)."""
        return "".join(self.parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.thinking)

    @property
    def finish(self) -> str:
        assert self.finish_reason is not None
        return finish_of(self.finish_reason, self.calls)

    def completion(self, usage: Usage) -> Completion:
        assert self.finish_reason is not None
        return Completion(
            self.text, self.finish_reason, usage, self.reasoning, tuple(self.logprobs), self.stop_sequence
        )


@dataclass(slots=True, eq=False)
class GenerationRecord:
    """The whole generation: its choices, the usage of all (the prompt once, every choice's
    tokens), the finish of the choice that ended last, and the request's timings."""

    choices: list[ChoiceRecord]
    timings: RequestTimings
    usage: Usage | None = None
    last_finish: FinishReason | None = None

    @property
    def final_chunk(self) -> Chunk:
        """The generation's end as the streaming core's final chunk (for the observability record)."""
        return Chunk("", self.last_finish or FinishReason.STOP, self.usage)

    @classmethod
    def of_completion(
        cls, completion: Completion, calls: ToolCallFormat | None, timings: RequestTimings
    ) -> GenerationRecord:
        """The record of one answer gathered elsewhere (a `predict` row), its calls read in `calls`."""
        choice = ChoiceRecord(0, parts=[completion.text], written=[completion.text])
        if calls is not None:
            splitter = AnswerSplitter(calls)
            pieces = [*splitter.feed(completion.text), *splitter.finish()]
            choice.parts = [p for p in pieces if isinstance(p, str)]
            choice.calls, choice.opened_calls = splitter.calls, splitter.in_calls
            choice.all_calls = splitter.opened_calls
        choice.thinking, choice.logprobs = [completion.reasoning], list(completion.logprobs)
        choice.finish_reason, choice.usage = completion.finish_reason, completion.usage
        choice.stop_sequence = completion.stop_sequence
        return cls([choice], timings, completion.usage, completion.finish_reason)

    def completions(self) -> list[Completion]:
        usage = self.usage or Usage(0, 0)
        return [choice.completion(usage) for choice in self.choices]


# -- the generation -------------------------------------------------------------------------------
class Generation(Iterator[Event]):
    """The events of one request's generation (see the module doc). Closing it stops the engine
    between two tokens; `record` is complete once `Final` has been read."""

    __slots__ = ("_events", "record", "cancel")

    def __init__(self, llm: LLM, request: GenerationRequest, cancel: CancelToken, timings: RequestTimings):
        self.cancel = cancel
        self.record = GenerationRecord([ChoiceRecord(i) for i in range(request.n)], timings)
        self._events = self._run(llm, request)

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def _run(self, llm: LLM, request: GenerationRequest) -> Iterator[Event]:
        prepared, n, record = request.prepared, request.n, self.record
        if n == 1:
            streams = [llm.stream_prepared(prepared, self.cancel)]
            yield from _choice_events(streams[0], record.choices[0], request.calls)
            record.last_finish = record.choices[0].finish_reason
            self._end(record.choices)
            yield Final(record)
            return
        params = choice_params(prepared.params, n)
        reuse = PromptReuse()
        with llm.exclusive():
            # each choice its own constraint state: a sampled token advances only its choice's matcher
            tokens = llm.engine.generate_group(
                prepared.prompt_ids,
                params,
                self.cancel,
                llm.matchers(prepared, n),
                reuse,
                next_turn_opening=prepared.next_turn_opening,
            )
            chunks = [
                llm.chunks_of(t, prepared, self.cancel, p, reuse) for t, p in zip(tokens, params, strict=True)
            ]
            events = [
                _choice_events(c, choice, request.calls)
                for c, choice in zip(chunks, record.choices, strict=True)
            ]
            merged = merged_streams(events, self.cancel, concurrently=llm.engine.concurrent, sources=tokens)
            try:
                for event in merged:
                    if type(event) is ChoiceEnd:
                        record.last_finish = record.choices[event.choice].finish_reason
                    yield event
            finally:
                merged.close()
                for stream in events:
                    stream.close()
        self._end(record.choices)
        yield Final(record)

    def _end(self, choices: list[ChoiceRecord]) -> None:
        usages = [c.usage for c in choices if c.usage is not None]
        if not usages:
            return
        first = usages[0]
        # the choices share one engine report, read as each ended: the last read counts all
        self.record.usage = Usage(
            first.prompt_tokens,
            sum(u.completion_tokens for u in usages),
            first.cached_tokens,
            max(u.draft_tokens for u in usages),
            max(u.accepted_draft_tokens for u in usages),
        )


def _choice_events(
    chunks: Iterator[Chunk], choice: ChoiceRecord, calls: ToolCallFormat | None
) -> Iterator[Event]:
    """One choice's chunks as events, gathered into its record; with `calls`, its answer split
    into text and call pieces as it comes (`tool_stream`: tokens' logprobs go with the next
    text that comes out; a call's tokens have none on the wire, all of them in the record)."""
    index = choice.index
    try:
        if calls is None:
            for chunk in chunks:
                if chunk.text:
                    choice.parts.append(chunk.text)
                    if chunk.logprobs:
                        choice.logprobs += chunk.logprobs
                    yield Text(chunk.text, chunk.logprobs, index)
                elif chunk.finish_reason is None:
                    choice.thinking.append(chunk.reasoning)
                    choice.logprobs += chunk.logprobs
                    yield Reasoning(chunk.reasoning, chunk.logprobs, index)
                else:
                    yield _ended(choice, chunk)
                    return
            return
        splitter = AnswerSplitter(calls)
        for item in tool_stream(_written(chunks, choice), calls, splitter):
            if type(item) is ToolCallChunk:
                yield CallDelta(item.index, item.id, item.name, item.arguments, index)
            elif item.finish_reason is not None:  # type: ignore[union-attr]
                choice.calls, choice.opened_calls = splitter.calls, splitter.in_calls
                choice.all_calls = splitter.opened_calls
                yield _ended(choice, item)  # type: ignore[arg-type]
                return
            elif item.text:  # type: ignore[union-attr]
                choice.parts.append(item.text)  # type: ignore[union-attr]
                yield Text(item.text, item.logprobs, index)  # type: ignore[union-attr]
            else:
                choice.thinking.append(item.reasoning)  # type: ignore[union-attr]
                yield Reasoning(item.reasoning, item.logprobs, index)  # type: ignore[union-attr]
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _written(chunks: Iterator[Chunk], choice: ChoiceRecord) -> Iterator[Chunk]:
    """`chunks` as they are, their text and logprobs kept in the record (calls included)."""
    for chunk in chunks:
        if chunk.text:
            choice.written.append(chunk.text)
        choice.logprobs += chunk.logprobs
        yield chunk


def _ended(choice: ChoiceRecord, chunk: Chunk) -> ChoiceEnd:
    assert chunk.finish_reason is not None and chunk.usage is not None
    choice.finish_reason, choice.usage, choice.stop_sequence = (
        chunk.finish_reason,
        chunk.usage,
        chunk.stop_sequence,
    )
    return ChoiceEnd(choice.index, choice.finish, chunk.usage, chunk.stop_sequence)
