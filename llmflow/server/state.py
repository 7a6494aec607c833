"""Everything one app owns at run time, kept on `app.state.llmflow` (no module globals)."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request

from llmflow.server.admission import Admission
from llmflow.server.metrics import ServerMetrics
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings

if TYPE_CHECKING:
    from llmflow.server.running import RunningGeneration

logger = logging.getLogger(__name__)

#: how long shutdown waits for running generations to stop
SHUTDOWN_GRACE_S = 30.0

#: routes that never need the API key
PUBLIC_PATHS = frozenset({"/health", "/ping"})


@dataclass
class ServerState:
    served: ServedModel
    settings: ServerSettings
    admission: Admission
    metrics: ServerMetrics
    created: int = field(default_factory=lambda: int(time.time()))
    public_paths: set[str] = field(default_factory=lambda: set(PUBLIC_PATHS))
    #: paths counted by name in the request metrics (others count as "other")
    known_paths: set[str] = field(default_factory=set)
    active: set[RunningGeneration] = field(default_factory=set)
    _executor: ThreadPoolExecutor | None = None

    @classmethod
    def build(cls, served: ServedModel, settings: ServerSettings) -> ServerState:
        max_running = settings.max_running or served.max_concurrency
        admission = Admission(max_running, settings.max_queue, settings.retry_after_s)
        active: set[RunningGeneration] = set()  # until a generation is over on both sides (worker, response)
        metrics = ServerMetrics(running=lambda: len(active), waiting=lambda: admission.waiting)
        engine = served.llm.engine if served.llm is not None else None
        if engine is not None and engine.stats() is not None:
            metrics.watch_engine(engine.stats)
        return cls(served, settings, admission, metrics, active=active)

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

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop every generation (each ends within a token) and wait for the worker threads, so
        that nobody frees the model while a thread still decodes with it."""
        for generation in list(self.active):
            generation.stream.stop()
        executor, self._executor = self._executor, None
        if executor is None:
            return
        waiting = asyncio.ensure_future(asyncio.to_thread(executor.shutdown, wait=True))
        done, _ = await asyncio.wait({waiting}, timeout=grace_s)
        if not done:
            logger.warning("a generation did not stop within %s s of shutdown", grace_s)


def get_state(request: Request) -> ServerState:
    return request.app.state.llmflow
