"""A generation to the client: admitted and started (`start`), then streamed as SSE events or
sent whole in an encoder's format (`serve`). Routes parse a body into a `GenerationRequest`,
pick an encoder (`llmflow.wire`) and end with these two calls. A `predict` call's rows are
several generations of one request (`start_rows`, then `finished_rows`).

The request's record (`ObservedGeneration`: timings, outcome, trace) is fed here as events go
out, so the time to first token is the time the first text left the server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from fastapi.responses import JSONResponse, Response
from starlette.types import Receive

from llmflow.errors import LlmflowError
from llmflow.generation import CallDelta, Event, Final, GenerationRecord, GenerationRequest, Reasoning, Text
from llmflow.llm import LLM
from llmflow.observability import ObservedGeneration, RequestTimings
from llmflow.server.event_stream import EventStream
from llmflow.server.running import RunningGeneration, start_generation, stop_on_disconnect
from llmflow.server.state import ModelState
from llmflow.types import CancelToken, Chunk, Completion, FinishReason, Usage
from llmflow.wire.sse import DONE

logger = logging.getLogger(__name__)

#: the answer's header naming the registry prompt version of its system prompt
PROMPT_HEADER = "llmflow-prompt"
TEMPLATE_HEADER = "llmflow-chat-template"


class Encoder(Protocol):
    """A wire format (see `llmflow.wire`): what a stream opens with, each event's bytes (b"" for
    none), an error event after the stream began, and the whole answer."""

    def opening(self) -> bytes: ...
    def event(self, event: Event) -> bytes: ...
    def error(self, error: BaseException) -> bytes: ...
    def whole(self, record: GenerationRecord) -> dict[str, Any]: ...


def final_chunk(event: Any) -> Chunk | None:
    """The generation's end among its events, for a record the client did not read to the end."""
    return event.record.final_chunk if type(event) is Final else None


async def start(
    state: ModelState,
    llm: LLM,
    request: GenerationRequest,
    observed: ObservedGeneration,
    receive: Receive,
) -> RunningGeneration[Event]:
    """Admit the request (see `start_generation`) and start its generation: on the loop when
    the engine pushes its tokens, else in a worker thread."""
    if request.prepared.prompt is not None:
        observed.name_prompt(request.prepared.prompt.uri)
    if request.prepared.template is not None:
        observed.name_template(request.prepared.template.uri)
    cancel = CancelToken()
    timings = observed.timings
    return await start_generation(
        state,
        lambda: llm.start(request, cancel, timings),
        observed,
        receive,
        final_chunk,
        cancel,
        on_loop=llm.engine.pushes_tokens,
    )


async def start_rows(
    state: ModelState,
    llm: LLM,
    requests: Sequence[GenerationRequest],
    observed: ObservedGeneration,
    receive: Receive,
) -> RunningGeneration[tuple[int, Event]]:
    """Admit one request of several generations (a `predict` call's rows) and start them in its
    place: all at once on the loop when the engine pushes its tokens, else one after the other
    in a worker thread. Items are (row, event); each row's record is timed from its own start."""
    cancel = CancelToken()
    rows = [partial(_row_events, row, llm, request, cancel) for row, request in enumerate(requests)]
    return await start_generation(
        state, rows, observed, receive, cancel=cancel, on_loop=llm.engine.pushes_tokens
    )


def _row_events(
    row: int, llm: LLM, request: GenerationRequest, cancel: CancelToken
) -> Iterator[tuple[int, Event]]:
    """Row `row`'s events, its clock (the record's timings) fed as they are made. Once `cancel`
    is raised, a row not begun ends at once, cancelled."""
    clock = RequestTimings()
    clock.admit()  # a row's clock starts with it
    clock.prompt_tokens = len(request.prepared.prompt_ids)
    if cancel.cancelled:  # the caller has gone
        usage = Usage(clock.prompt_tokens, 0)
        clock.finish(FinishReason.CANCELLED.value, usage)
        completion = Completion("", FinishReason.CANCELLED, usage)
        yield row, Final(GenerationRecord.of_completion(completion, None, clock))
        return
    generation = llm.start(request, cancel, clock)
    try:
        for event in generation:
            kind = type(event)
            if kind is Text:
                clock.token()
            elif kind is Final:
                final = event.record.final_chunk  # type: ignore[union-attr]
                clock.finish(final.finish_reason.value, final.usage)  # type: ignore[union-attr]
            yield row, event
    finally:
        generation.close()


async def serve(
    generation: RunningGeneration[Event], encoder: Encoder, *, stream: bool, receive: Receive
) -> Response:
    """The generation as an SSE stream in `encoder`'s format, or its whole answer as JSON; the
    registry prompt versions its system prompt and chat template were read from, if any, as the
    `llmflow-prompt` and `llmflow-chat-template` headers."""
    response: Response
    if stream:
        response = EventStream(events(generation, encoder), on_close=generation.close)
    else:
        record = await finished(generation, receive)
        response = JSONResponse(encoder.whole(record))
    return with_prompt_header(response, generation.observed)


def with_prompt_header(response: Response, observed: ObservedGeneration) -> Response:
    """`response` naming the registry prompt versions the request's system prompt and chat
    template came from."""
    if observed.prompt is not None:
        response.headers[PROMPT_HEADER] = observed.prompt
    if observed.template is not None:
        response.headers[TEMPLATE_HEADER] = observed.template
    return response


def watch_generation(observed: ObservedGeneration, event: Any) -> bool:
    """Feed the record with one of a generation's events; True at its end (`Final`)."""
    kind = type(event)
    if kind is Text:
        observed.text(event.text)
    elif kind is Final:
        observed.final(event.record.final_chunk)
        return True
    elif kind is CallDelta:
        observed.text(event.arguments)
    elif kind is Reasoning:
        observed.text("")
    return False


#: `events`' `first` when no item was read ahead
NOTHING_READ: Any = object()


async def events(
    generation: RunningGeneration[Any],
    encoder: Encoder,
    done: bytes = DONE,
    *,
    watch: Callable[[ObservedGeneration, Any], bool] = watch_generation,
    first: Any = NOTHING_READ,
) -> AsyncGenerator[bytes, None]:
    """Every item's bytes, then `done` ([DONE]; b"" for nothing). `watch` feeds the record with
    an item and says whether it was the last (a generation's events by default); `first`: an
    item read ahead (a model that checks its input at its first chunk). A failure after the
    stream began is the encoder's error event."""
    observed = generation.observed
    encode = encoder.event
    try:
        opening = encoder.opening()
        if opening:
            yield opening
        items = generation.stream if first is NOTHING_READ else _after(first, generation.stream)
        async for item in items:
            ended = watch(observed, item)
            out = encode(item)
            if out:
                yield out
            if ended:
                break
    except Exception as exc:
        if isinstance(exc, LlmflowError):  # a refusal or a limit, told to the client
            logger.info("stream ended with an error: %s", exc)
        else:
            logger.error("stream failed", exc_info=exc)
        observed.decide("error")
        yield encoder.error(exc)
    finally:
        generation.close()
    if done:
        yield done


async def _after(first: Any, rest: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    yield first
    async for item in rest:
        yield item


async def finished(generation: RunningGeneration[Event], receive: Receive) -> GenerationRecord:
    """The generation's record once it has ended; a client that disconnects meanwhile stops it."""
    with _watched(generation, receive) as observed:
        async for event in generation.stream:
            kind = type(event)
            if kind is Text:
                observed.text(event.text)  # type: ignore[union-attr]
            elif kind is CallDelta:
                observed.text(event.arguments)  # type: ignore[union-attr]
            elif kind is Final:
                observed.final(event.record.final_chunk)  # type: ignore[union-attr]
                return event.record  # type: ignore[union-attr]
    raise RuntimeError("the generation ended without a final event")


async def finished_rows(
    generation: RunningGeneration[tuple[int, Event]], receive: Receive, rows: int
) -> list[GenerationRecord]:
    """Every row's record once all have ended (see `start_rows`); the request's record gets each
    row's text as it comes, and at the end the usage of all (with several rows, the trace's
    outputs are the rows' texts). A client that disconnects meanwhile stops them all."""
    records: list[GenerationRecord | None] = [None] * rows
    left = rows
    with _watched(generation, receive) as observed:
        async for row, event in generation.stream:
            kind = type(event)
            if kind is Text:
                observed.text(event.text)  # type: ignore[union-attr]
            elif kind is Final:
                records[row] = event.record  # type: ignore[union-attr]
                left -= 1
                if left == 0:
                    done = [record for record in records if record is not None]
                    observed.final(_all_rows(done, event.record.final_chunk))  # type: ignore[union-attr]
                    if observed.trace is not None and rows > 1:
                        observed.trace.set_result([record.choices[0].text for record in done])
                    return done
    raise RuntimeError("the generation ended without a final event")


@contextmanager
def _watched(generation: RunningGeneration[Any], receive: Receive) -> Iterator[ObservedGeneration]:
    """The generation's observer while a route reads it to its end: a client that disconnects
    stops it, a failure is recorded as the request's outcome, and it is closed either way."""
    try:
        with stop_on_disconnect(generation, receive):
            yield generation.observed
    except BaseException:
        generation.observed.decide("error")
        raise
    finally:
        generation.close()


def _all_rows(records: list[GenerationRecord], last: Chunk) -> Chunk:
    """The request's end: the finish of the row that ended last, the usage of every row."""
    usages = [record.usage for record in records if record.usage is not None]
    total = Usage(
        sum(u.prompt_tokens for u in usages),
        sum(u.completion_tokens for u in usages),
        sum(u.cached_tokens for u in usages),
        sum(u.draft_tokens for u in usages),
        sum(u.accepted_draft_tokens for u in usages),
    )
    return Chunk("", last.finish_reason, total)
