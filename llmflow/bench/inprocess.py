"""Benchmark an `llmflow.LLM` without HTTP: each request streams in a worker thread.

Arrival times are taken when a chunk leaves `LLM.stream`, so the numbers are what the
model and llmflow's streaming cost, without a server, a network or SSE framing.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from llmflow.bench.records import ErrorKind, RequestRecord, RequestSpec
from llmflow.errors import InvalidRequest
from llmflow.types import CancelToken

if TYPE_CHECKING:
    from llmflow.llm import LLM


def load_llm(
    model: str | None, engine_options: dict[str, Any] | None = None, *, concurrent: bool = False
) -> LLM:
    """What MODEL names (see `llmflow.mlflow.model_ref`): weights (None: the embedded model), or
    an MLflow model whose llmflow model is used directly (with the engine options it was logged
    with, and `engine_options` on top). `concurrent`: requests will run several at once, so a
    GGUF model gets the engine that batches them, as `llmflow serve` gives it."""
    from llmflow.load_spec import LoadSpec
    from llmflow.mlflow.model_ref import resolve

    llm = resolve(model, LoadSpec(engine_options=engine_options or {}), concurrent=concurrent).llm
    if llm is None:
        raise InvalidRequest.single(
            "model",
            f"{model!r} is not an llmflow model; serve it (llmflow serve or mlflow models serve) "
            "and benchmark it with --url",
        )
    return llm


class InProcessBackend:
    """Runs `llm.stream` in up to `max_workers` threads; an engine that cannot run
    generations together queues them inside the LLM, as a server would."""

    def __init__(
        self,
        llm: LLM,
        *,
        api: str = "chat",
        temperature: float = 0.0,
        max_workers: int = 8,
        owns_llm: bool = False,
    ):
        self.llm = llm
        self.owns_llm = owns_llm
        self.raw = api == "completions"
        self.temperature = temperature
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="llmflow-bench")
        self._live: set[CancelToken] = set()

    async def run(self, spec: RequestSpec) -> RequestRecord:
        loop = asyncio.get_running_loop()
        sent_at = time.perf_counter()  # here, so that waiting for a worker thread counts too
        return await loop.run_in_executor(self._executor, self._run_sync, spec, sent_at)

    async def aclose(self) -> None:
        for token in list(self._live):
            token.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self.owns_llm:
            self.llm.close()

    def _run_sync(self, spec: RequestSpec, sent_at: float) -> RequestRecord:
        record = RequestRecord(spec.index, sent_at=sent_at, spec_prompt_tokens=spec.prompt_tokens)
        cancel = CancelToken()
        self._live.add(cancel)
        params = {"max_tokens": spec.max_tokens, "temperature": self.temperature}
        prompt: Any = spec.as_prompt() if self.raw else spec.as_messages()
        try:
            for chunk in self.llm.stream(prompt, params, raw=self.raw, cancel=cancel):
                now = time.perf_counter()
                if chunk.is_final:
                    record.ended_at = now
                    record.finish_reason = chunk.finish_reason.value if chunk.finish_reason else None
                    if chunk.usage is not None:
                        record.usage_prompt_tokens = chunk.usage.prompt_tokens
                        record.usage_output_tokens = chunk.usage.completion_tokens
                else:
                    record.arrivals.append(now)
                    record.parts.append(chunk.text)
        except Exception as exc:  # a model crashing mid-stream is a result, not a reason to stop
            record.fail(ErrorKind.ENGINE, f"{type(exc).__name__}: {exc}")
        finally:
            self._live.discard(cancel)
            if record.ended_at is None:
                record.ended_at = time.perf_counter()
        return record
