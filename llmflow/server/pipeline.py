"""The one server loop: a running generation's items, observed and written in a wire format.

Every route that generates ends here: it prepares its request, starts a `RunningGeneration`, and picks
a `WireFormat` (OpenAI chat, OpenAI text, MLflow's chunk dicts). `stream_events` streams and
`collect` waits for the whole answer; both feed the generation's record (`ObservedGeneration`) as
items go out, and both close the generation however they end. A new output format is one new
`WireFormat`, nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol, TypeVar

from starlette.types import Receive

from llmflow.errors import LlmflowError
from llmflow.observability import ObservedGeneration, RequestTimings, RequestTrace, tracing_wanted
from llmflow.observability.trace import SPAN_TYPE_LLM
from llmflow.server.event_stream import DONE
from llmflow.server.running import RunningGeneration, stop_on_disconnect
from llmflow.server.state import ModelState
from llmflow.tools import ToolCallChunk
from llmflow.types import Chunk, Completion, FinishReason, TokenLogprob, Usage

logger = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

#: `stream_events`' `first` when no item was read ahead
NOTHING_READ: Any = object()


class WireFormat(Protocol[T_contra]):
    """Pure functions from a generation's items (and, at the end, its timings) to SSE bytes:
    what goes out first (b"" for nothing), the final chunk among the items (None for others),
    an item's text, a non-final item's event (the per-token path), the final item's events, and
    an error event after streaming began (the stream then ends with [DONE])."""

    def opening(self) -> bytes: ...
    def final_of(self, item: T_contra) -> Chunk | None: ...
    def text_of(self, item: T_contra) -> str: ...
    def item(self, item: T_contra) -> bytes: ...
    def final(self, item: T_contra, final: Chunk, timings: RequestTimings) -> bytes: ...
    def error(self, error: Exception) -> bytes: ...


class ChunkFormat:
    """What every format of llmflow's own chunks shares: the final chunk has the finish reason."""

    @staticmethod
    def opening() -> bytes:
        return b""

    @staticmethod
    def final_of(chunk: Chunk) -> Chunk | None:
        return chunk if chunk.finish_reason is not None else None

    @staticmethod
    def text_of(chunk: Chunk) -> str:
        return chunk.text


class ToolItems:
    """How a format reads the items of a tool stream (`tools.tool_stream`): text chunks and
    function call pieces (`ToolCallChunk`); the final chunk has the finish reason."""

    @staticmethod
    def final_of(item: Chunk | ToolCallChunk) -> Chunk | None:
        return item if isinstance(item, Chunk) and item.finish_reason is not None else None

    @staticmethod
    def text_of(item: Chunk | ToolCallChunk) -> str:
        return item.text if isinstance(item, Chunk) else item.arguments


def observe(
    state: ModelState,
    timings: RequestTimings,
    name: str,
    inputs: Callable[[], Any],
    *choices: bool | None,
    span_type: str = SPAN_TYPE_LLM,
) -> ObservedGeneration:
    """The record of one request, with an MLflow trace (span `name`, its inputs the request) when
    tracing is wanted: `choices` (a call's `trace` param, the model's setting) first, then the
    server's setting."""
    if not tracing_wanted(*choices, state.settings.tracing):
        return ObservedGeneration(timings)
    attributes = {"llmflow.engine": state.served.engine_name, "llmflow.model": state.served.name}
    return ObservedGeneration(
        timings, RequestTrace(name, inputs(), attributes=attributes, span_type=span_type)
    )


async def stream_events(
    generation: RunningGeneration[T], fmt: WireFormat[T], first: Any = NOTHING_READ, done: bytes = DONE
) -> AsyncGenerator[bytes, None]:
    """The events of `generation` in `fmt`, then `done` ([DONE]; b"" for nothing, as Anthropic's
    streams end); `first` is an item read ahead (a model that checks its input at its first
    item). Ends at the final item."""
    observed = generation.observed
    final_of, text_of, item_event = fmt.final_of, fmt.text_of, fmt.item
    try:
        opening = fmt.opening()
        if opening:
            yield opening
        items = generation.stream
        item = first
        while True:
            if item is NOTHING_READ:
                try:
                    item = await items.__anext__()
                except StopAsyncIteration:
                    break
            final = final_of(item)
            if final is None:
                observed.text(text_of(item))
                yield item_event(item)
                item = NOTHING_READ
                continue
            observed.final(final)
            yield fmt.final(item, final, observed.timings)
            break
    except Exception as exc:
        if isinstance(exc, LlmflowError):  # a refusal or a limit, told to the client
            logger.info("stream ended with an error: %s", exc)
        else:
            logger.error("stream failed", exc_info=exc)
        observed.decide("error")
        yield fmt.error(exc)
    finally:
        generation.close()
    if done:
        yield done


async def collect(generation: RunningGeneration[Any], receive: Receive, n: int = 1) -> list[Completion]:
    """The whole answer: one completion per choice (items are `Chunk`s, or `ChoiceChunk`s when
    `n` > 1), once every choice has ended. A choice's completion has the usage its final chunk
    carries, else the total (OpenAI's choices: the last to end carries the usage of all; rows
    of `predict`: each its own). A client that disconnects meanwhile stops the generation."""
    answers = [_Answer() for _ in range(n)]
    observed = generation.observed
    running = n
    try:
        with stop_on_disconnect(generation, receive):
            async for item in generation.stream:
                index, chunk = (0, item) if n == 1 else (item.index, item.chunk)
                answer = answers[index]
                answer.logprobs += chunk.logprobs
                if chunk.text:
                    observed.text(chunk.text)
                    answer.parts.append(chunk.text)
                elif chunk.reasoning:
                    answer.thinking.append(chunk.reasoning)
                elif chunk.finish_reason is not None:
                    answer.finish, answer.usage = chunk.finish_reason, chunk.usage
                    answer.stop_sequence = chunk.stop_sequence
                    running -= 1
                    if running == 0:
                        usages = [a.usage for a in answers if a.usage is not None]
                        prompt = sum(u.prompt_tokens for u in usages)
                        completion = sum(u.completion_tokens for u in usages)
                        total = Usage(prompt, completion, sum(u.cached_tokens for u in usages))
                        observed.final(Chunk("", chunk.finish_reason, total))
                        return [a.completion(a.usage or total) for a in answers]
        raise RuntimeError("the generation ended without a final chunk")
    except BaseException:
        observed.decide("error")
        raise
    finally:
        generation.close()


class _Answer:
    """One choice's pieces, as `collect` gathers them."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.thinking: list[str] = []
        self.logprobs: list[TokenLogprob] = []
        self.finish: FinishReason | None = None
        self.usage: Usage | None = None
        self.stop_sequence: str | None = None

    def completion(self, usage: Usage) -> Completion:
        assert self.finish is not None
        thinking, logprobs = "".join(self.thinking), tuple(self.logprobs)
        return Completion("".join(self.parts), self.finish, usage, thinking, logprobs, self.stop_sequence)
