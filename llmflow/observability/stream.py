"""An in-process stream, timed (and traced) as its consumer takes the chunks.

`ObservedStream` sits between `LLM.stream_prepared` and whoever reads it (`predict_stream`'s
chunk dicts, `predict`'s collector). It fills a `RequestTimings` the way the server does (a text
chunk counts when it is handed over) and ends its `RequestTrace` exactly once:

- at the final chunk (finish reason and usage);
- when the engine fails (status ERROR);
- when the consumer stops early: `close()` (a `break` out of a generator that wraps this one
  closes it) or garbage collection. The generation is then cancelled and drained to its final
  chunk, which costs at most one token of work, so the trace still gets the finish reason
  ("cancelled") and exact token counts. A stream never started is not started to drain it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from llmflow.observability.trace import RequestTrace, close_iterator
from llmflow.timing import RequestTimings
from llmflow.types import CancelToken, Chunk, FinishReason

logger = logging.getLogger(__name__)

#: chunks read at most while draining a cancelled generation (engines stop within one token)
DRAIN_LIMIT = 64


class ObservedStream(Iterator[Chunk]):
    """`chunks` (a generation started with `cancel`), observed into `timings` and `trace`."""

    __slots__ = ("_chunks", "_cancel", "timings", "trace", "_started", "_ended")

    def __init__(
        self,
        chunks: Iterator[Chunk],
        cancel: CancelToken,
        timings: RequestTimings,
        trace: RequestTrace | None = None,
    ):
        self._chunks = chunks
        self._cancel = cancel
        self.timings = timings
        self.trace = trace
        self._started = False
        self._ended = False

    def __iter__(self) -> ObservedStream:
        return self

    def __next__(self) -> Chunk:
        """The per-token path: the inner `next`, one clock read, one or two list appends."""
        self._started = True
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._end()
            raise
        except Exception as exc:
            self._end(exc)
            raise
        except BaseException:  # KeyboardInterrupt inside the engine: the stream is over
            self._end(reason=FinishReason.CANCELLED)
            raise
        text = chunk.text
        if text:
            self.timings.token()
            if self.trace is not None:
                self.trace.parts.append(text)
        else:
            self._final(chunk)
        return chunk

    def close(self) -> None:
        """Stop early: cancel, drain to the final chunk for the trace, close. Idempotent."""
        try:
            if not self._ended and self._started:
                self._cancel.cancel()
                self._drain()
            elif not self._started and self.timings.prompt_tokens is not None:
                self.timings.completion_tokens = 0  # never started: nothing was generated
        finally:
            close_iterator(self._chunks)
            self._end(reason=FinishReason.CANCELLED)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - never raise from a finalizer
            logger.debug("closing an abandoned stream failed", exc_info=True)

    def _final(self, chunk: Chunk) -> None:
        assert chunk.finish_reason is not None
        self.timings.finish(chunk.finish_reason.value, chunk.usage)
        if self.trace is not None:
            self.trace.record(chunk)
        self._end()

    def _drain(self) -> None:
        for _ in range(DRAIN_LIMIT):
            try:
                chunk = next(self._chunks)
            except StopIteration:
                return
            except ValueError:  # being iterated in another thread right now: leave it to that one
                return
            except Exception as exc:
                self._end(exc)
                return
            if chunk.is_final:  # text drained after the stop is not part of the answer
                self._final(chunk)
                return

    def _end(self, error: BaseException | None = None, reason: FinishReason | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        timings = self.timings
        if error is not None:
            timings.finish("error")
        elif reason is not None:
            timings.finish(reason.value)
        if self.trace is not None:
            if reason is not None and self.trace.finish_reason is None:
                self.trace.finish_reason = reason.value
            self.trace.end(timings, error)
