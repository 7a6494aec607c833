"""A request's record (`observe`: timings and, when tracing is wanted, an MLflow trace), and the
whole answers of a `predict` call's rows (`collect`), which the server generates one after the
other as one stream of chunks (see `mlflow.predict_call`). Generations of one request are served
by `transport`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.types import Receive

from llmflow.media.redact import without_image_data
from llmflow.observability import ObservedGeneration, RequestTimings, RequestTrace, tracing_wanted
from llmflow.observability.propagation import caller_trace
from llmflow.observability.trace import SPAN_TYPE_LLM
from llmflow.server.running import RunningGeneration, stop_on_disconnect
from llmflow.server.state import ModelState
from llmflow.types import Chunk, Completion, FinishReason, TokenLogprob, Usage

logger = logging.getLogger(__name__)


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
    server's setting, then the auto rule, which a caller's sampled `traceparent` turns on. With a
    `traceparent`, the span continues the caller's trace."""
    caller = caller_trace.get()
    if not tracing_wanted(*choices, state.settings.tracing, True if caller and caller.sampled else None):
        return ObservedGeneration(timings)
    attributes = {"llmflow.engine": state.served.engine_name, "llmflow.model": state.served.name}
    recorded = without_image_data(inputs())  # an inline image's bytes stay out of the trace
    trace = RequestTrace(name, recorded, attributes=attributes, span_type=span_type, caller=caller)
    return ObservedGeneration(timings, trace)


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
                        total = Usage(
                            prompt,
                            completion,
                            sum(u.cached_tokens for u in usages),
                            sum(u.draft_tokens for u in usages),
                            sum(u.accepted_draft_tokens for u in usages),
                        )
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
