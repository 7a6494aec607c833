"""One generation's record, kept by one owner: `ObservedGeneration`.

Its timings (clock readings, usage, outcome) and its MLflow trace are fed as chunks are handed
to their consumer, the same way in process (`ObservedStream`) and in the server (on the event
loop, as chunks go out), and closed exactly once by `end()`. The first outcome decided wins: a
timeout or a failure is not overwritten by the "cancelled" that follows it.

`ObservedStream` sits between `LLM.stream_prepared` and whoever reads it in process
(`predict_stream`'s chunk dicts, `predict`'s collector). It ends its record:

- at the final chunk (finish reason and usage);
- when the engine fails (status ERROR);
- when the consumer stops early: `close()` (a `break` out of a generator that wraps this one
  closes it) or garbage collection. The generation is then cancelled and drained to its final
  chunk, which costs at most one token of work, so the record still gets the finish reason
  ("cancelled") and exact token counts. A stream never started is not started to drain it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llmflow.generation import CallDelta, Final, Text
from llmflow.observability.timings import RequestTimings
from llmflow.observability.trace import RequestTrace, close_iterator
from llmflow.types import CancelToken, Chunk, FinishReason

logger = logging.getLogger(__name__)

#: chunks read at most while draining a cancelled generation (engines stop within one token)
DRAIN_LIMIT = 64


@dataclass(slots=True, eq=False)
class ObservedGeneration:
    """Timings, usage, outcome and trace of one generation. `text()` and `final()` as chunks are
    handed over, `decide()` for an outcome known before the end, `end()` once."""

    timings: RequestTimings = field(default_factory=RequestTimings)
    trace: RequestTrace | None = None
    #: the registry prompt version the request's system prompt was read from (`prompts:/NAME/VERSION`)
    prompt: str | None = field(default=None, init=False)
    #: the registry prompt version the chat template was read from
    template: str | None = field(default=None, init=False)
    _final_seen: bool = field(default=False, init=False)
    #: set by the first `end()`
    ended: bool = field(default=False, init=False)

    def name_prompt(self, uri: str) -> None:
        """The request's system prompt came from registry version `uri`: the trace names it
        (`llmflow.prompt`, before the span starts)."""
        self.prompt = uri
        if self.trace is not None:
            self.trace.attributes["llmflow.prompt"] = uri

    def name_template(self, uri: str) -> None:
        """The chat template that rendered the request came from registry version `uri`: the
        trace names it (`llmflow.chat_template`)."""
        self.template = uri
        if self.trace is not None:
            self.trace.attributes["llmflow.chat_template"] = uri

    def text(self, text: str) -> None:
        """A text chunk was handed over. The per-token path: one clock read, one or two appends."""
        self.timings.token()
        if self.trace is not None:
            self.trace.parts.append(text)

    def final(self, chunk: Chunk) -> None:
        """The final chunk was handed over: finish reason, usage and end time (the first wins)."""
        if self._final_seen:
            return
        self._final_seen = True
        reason = chunk.finish_reason.value if chunk.finish_reason is not None else "stop"
        self.timings.finish(reason, chunk.usage)

    def decide(self, outcome: str) -> None:
        """How the generation ended, when known before its end (timeout, error): the first wins."""
        self.timings.outcome = self.timings.outcome or outcome

    def end(self, reason: str = FinishReason.CANCELLED.value, error: BaseException | None = None) -> None:
        """Close the record: the end time and outcome unless already known (`reason`, or "error"
        with `error`), and the trace's span. Only the first call counts."""
        if self.ended:
            return
        self.ended = True
        self.timings.finish("error" if error is not None else reason)
        if self.trace is not None:
            self.trace.end(self.timings, error)


class ObservedStream(Iterator[Any]):
    """`chunks` (a generation started with `cancel`), observed into `observed`."""

    __slots__ = ("_chunks", "_cancel", "observed", "_started")

    def __init__(self, chunks: Iterator[Any], cancel: CancelToken, observed: ObservedGeneration):
        self._chunks = chunks
        self._cancel = cancel
        self.observed = observed
        self._started = False

    def __next__(self) -> Any:
        """The per-token path: the inner `next`, one clock read, one or two list appends."""
        self._started = True
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self.observed.end()
            raise
        except Exception as exc:
            self.observed.end(error=exc)
            raise
        except BaseException:  # KeyboardInterrupt inside the engine: the stream is over
            self.observed.end()
            raise
        final = self._final_of(chunk)
        if final is None:
            text = self._text_of(chunk)
            if text:
                self.observed.text(text)
        else:
            self._final(final)
        return chunk

    @staticmethod
    def _final_of(chunk: Any) -> Chunk | None:
        """The generation's end, when `chunk` is it."""
        return chunk if chunk.finish_reason is not None else None

    @staticmethod
    def _text_of(chunk: Any) -> str:
        return chunk.text

    def close(self) -> None:
        """Stop early: cancel, drain to the final chunk for the record, close. Idempotent."""
        observed = self.observed
        try:
            if not observed.ended and self._started:
                self._cancel.cancel()
                self._drain()
            elif not self._started and observed.timings.prompt_tokens is not None:
                observed.timings.completion_tokens = 0  # never started: nothing was generated
        finally:
            close_iterator(self._chunks)
            observed.end()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - never raise from a finalizer
            logger.debug("closing an abandoned stream failed", exc_info=True)

    def _final(self, chunk: Chunk) -> None:
        self.observed.final(chunk)
        self.observed.end()

    def _drain(self) -> None:
        for _ in range(DRAIN_LIMIT):
            try:
                chunk = next(self._chunks)
            except StopIteration:
                return
            except ValueError:  # being iterated in another thread right now: leave it to that one
                return
            except Exception as exc:
                self.observed.end(error=exc)
                return
            final = self._final_of(chunk)
            if final is not None:  # text drained after the stop is not part of the answer
                self._final(final)
                return


class ObservedEvents(ObservedStream):
    """A `Generation`'s events (see `llmflow.generation`), observed as `ObservedStream` observes
    chunks: text and call pieces time the tokens, `Final` ends the record."""

    __slots__ = ()

    @staticmethod
    def _final_of(event: Any) -> Chunk | None:
        return event.record.final_chunk if type(event) is Final else None

    @staticmethod
    def _text_of(event: Any) -> str:
        kind = type(event)
        if kind is Text:
            return event.text
        return event.arguments if kind is CallDelta else ""
