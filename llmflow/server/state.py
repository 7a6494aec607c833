"""Everything one app owns at run time, kept on `app.state.llmflow` (no module globals): the
server's settings and metrics, and the models it serves (`models.ModelRegistry`), each loaded
one with a `ModelState` of its own."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from fastapi import Request

from llmflow.media.reader import ImageReader
from llmflow.server.admission import Admission
from llmflow.server.metrics import ServerMetrics
from llmflow.server.response_store import ResponseStore
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings

if TYPE_CHECKING:
    from llmflow.server.model_registry import ModelRegistry
    from llmflow.server.running import RunningGeneration

logger = logging.getLogger(__name__)

#: how long shutdown waits for running generations to stop
SHUTDOWN_GRACE_S = 30.0

#: routes that never need the API key
PUBLIC_PATHS = frozenset({"/health", "/ping"})


@dataclass
class ModelState:
    """One loaded model at run time: what it serves, its own admission queue and worker
    threads, and its generations that are not over yet. Routes generate through it."""

    served: ServedModel
    settings: ServerSettings
    admission: Admission
    metrics: ServerMetrics
    active: set[RunningGeneration] = field(default_factory=set)
    _executor: ThreadPoolExecutor | None = None

    @classmethod
    def build(
        cls,
        served: ServedModel,
        settings: ServerSettings,
        metrics: ServerMetrics,
        max_running: int | None = None,
        max_queue: int | None = None,
    ) -> ModelState:
        """`max_running`, `max_queue`: this model's own limits, else the server's settings; a
        model runs at most what its engine decodes at once unless told otherwise."""
        running = max_running or settings.max_running or served.max_concurrency
        queue = settings.max_queue if max_queue is None else max_queue
        admission = Admission(running, queue, settings.retry_after_s)
        return cls(served, settings, admission, metrics)

    @property
    def name(self) -> str:
        return self.served.name

    @property
    def busy(self) -> bool:
        """A generation runs or waits (until it is over on both sides: worker and response)."""
        return bool(self.active) or self.admission.running > 0 or self.admission.waiting > 0

    @property
    def executor(self) -> ThreadPoolExecutor:
        """Worker threads for generations, one per place: a place is freed only when its worker
        has finished."""
        if self._executor is None:
            workers = self.admission.max_running
            self._executor = ThreadPoolExecutor(workers, thread_name_prefix="llmflow-generate")
        return self._executor

    def end_generations(self) -> None:
        """Stop every running generation: each ends within a token with its final chunk (finish
        reason and [DONE] for streams), so no answer is cut half-written."""
        for generation in list(self.active):
            generation.stream.stop()

    def close(self) -> None:
        """Free an idle model: its worker threads (each has finished) and its LLM."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        if self.served.llm is not None:
            self.served.llm.close()

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop every generation (each ends within a token) and wait for the worker threads, so
        that nobody frees the model while a thread still decodes with it."""
        self.end_generations()
        executor, self._executor = self._executor, None
        if executor is not None:  # none when every stream was read on the event loop (pushed tokens)
            waiting = asyncio.ensure_future(asyncio.to_thread(executor.shutdown, wait=True))
            done, _ = await asyncio.wait({waiting}, timeout=grace_s)
            if not done:
                logger.warning("a generation of %r did not stop within %s s of shutdown", self.name, grace_s)
                return
        if self.served.llm is not None:  # with a disk tier, the kept conversations outlive the server
            await asyncio.to_thread(self.served.llm.engine.persist)


@dataclass
class ServerState:
    settings: ServerSettings
    metrics: ServerMetrics
    models: ModelRegistry
    created: int = field(default_factory=lambda: int(time.time()))
    public_paths: set[str] = field(default_factory=lambda: set(PUBLIC_PATHS))
    #: paths counted by name in the request metrics (others count as "other")
    known_paths: set[str] = field(default_factory=set)
    #: the kept responses of /v1/responses (`store`, `previous_response_id`)
    responses: ResponseStore = field(default_factory=ResponseStore)

    @cached_property
    def images(self) -> ImageReader:
        """How a request's images are read (the settings' limits and URL policy)."""
        return self.settings.image_reader()

    def end_generations(self) -> None:
        for model in self.models.loaded():
            model.end_generations()


def get_state(request: Request) -> ServerState:
    return request.app.state.llmflow
