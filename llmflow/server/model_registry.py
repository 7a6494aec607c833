"""The models one server serves, by name, and the one resolver every route asks for a model.

Each model has a slot: its name, how to load it (a `ModelConfig`; None for a model handed over
loaded, which is never unloaded), its `ModelState` while loaded, and the requests that hold it.
`model_for(request, name)` finds the slot (an unknown name is a 404 naming `model`; None is the
default model, the first), loads it when it is not loaded (one load, however many requests ask
at once) and holds it until the request's answer is over (`ModelLeases`, an ASGI middleware).
A model that a request holds, or that runs or queues a generation, is never unloaded; idle ones
are, the least recently used first, beyond `max_loaded`, and after `idle_unload_s` without a
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from llmflow.errors import UnknownModel
from llmflow.server.metrics import ModelLoad, ServerMetrics
from llmflow.server.model_config import ModelConfig, check_unique
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings
from llmflow.server.state import ModelState, get_state

logger = logging.getLogger(__name__)

#: scope keys: the slots a request holds, and the name of the model it was answered by
LEASES_KEY = "llmflow.leases"
MODEL_KEY = "llmflow.model"

#: the longest the reaper sleeps between two looks at idle models
REAP_INTERVAL_S = 5.0


class ModelSlot:
    """One served model, loaded or not."""

    def __init__(self, name: str, config: ModelConfig | None, state: ModelState | None = None):
        self.name = name
        self.config = config
        self.state = state
        self.leases = 0
        self.last_used = time.monotonic()
        self.loading: asyncio.Future[None] | None = None

    @property
    def idle(self) -> bool:
        return self.leases == 0 and (self.state is None or not self.state.busy)

    @property
    def unloadable(self) -> bool:
        return self.config is not None and self.state is not None and self.idle

    @property
    def engine_name(self) -> str | None:
        if self.state is not None:
            return self.state.served.engine_name
        return self.config.engine if self.config is not None else None

    def gauges(self) -> ModelLoad:
        state = self.state
        if state is None:
            return ModelLoad(self.name, loaded=False)
        engine = state.served.llm.engine if state.served.llm is not None else None
        return ModelLoad(
            self.name,
            loaded=True,
            running=len(state.active),
            waiting=state.admission.waiting,
            engine_stats=engine.stats() if engine is not None else None,
        )


class ModelRegistry:
    """The slots of one server, in the order given: the first is the default model."""

    def __init__(self, slots: Sequence[ModelSlot], settings: ServerSettings, metrics: ServerMetrics):
        check_unique(slot.name for slot in slots)
        self._slots = {slot.name: slot for slot in slots}
        self.settings = settings
        self.metrics = metrics
        metrics.watch_models(lambda: [slot.gauges() for slot in self._slots.values()])

    @classmethod
    def build(
        cls, models: Sequence[ServedModel | ModelConfig], settings: ServerSettings, metrics: ServerMetrics
    ) -> ModelRegistry:
        """Models handed over loaded are served as they are; configs are loaded now, unless the
        server loads lazily (then at their first request)."""
        slots = []
        for model in models:
            if isinstance(model, ServedModel):
                slots.append(ModelSlot(model.name, None, ModelState.build(model, settings, metrics)))
                metrics.loads.labels(model.name).inc()
            elif settings.lazy:
                slots.append(ModelSlot(model.expected_name(), model))
            else:
                served = model.load()
                state = ModelState.build(served, settings, metrics, model.max_running, model.max_queue)
                slots.append(ModelSlot(served.name, model, state))
                metrics.loads.labels(served.name).inc()
        if not slots:
            raise ValueError("a server needs at least one model")
        return cls(slots, settings, metrics)

    @property
    def names(self) -> list[str]:
        return list(self._slots)

    @property
    def default(self) -> ModelSlot:
        return next(iter(self._slots.values()))

    def slot(self, name: str | None) -> ModelSlot:
        """The slot `name` names (None: the default model); a name not served is `UnknownModel`."""
        if name is None:
            return self.default
        found = self._slots.get(name)
        if found is None:
            raise UnknownModel(name, self.names)
        return found

    def loaded(self) -> Iterator[ModelState]:
        return (slot.state for slot in list(self._slots.values()) if slot.state is not None)

    async def lease(self, name: str | None, scope: Scope) -> ModelState:
        """The model `name` names, loaded, held until the request of `scope` is answered."""
        slot = self.slot(name)
        scope[MODEL_KEY] = slot.name
        slot.leases += 1
        slot.last_used = time.monotonic()
        scope.setdefault(LEASES_KEY, []).append(slot)
        return await self._loaded(slot)

    def release(self, slot: ModelSlot) -> None:
        slot.leases -= 1
        slot.last_used = time.monotonic()

    async def _loaded(self, slot: ModelSlot) -> ModelState:
        while slot.state is None:
            if slot.loading is None:
                slot.loading = asyncio.ensure_future(self._load(slot))
            # shielded: a client that leaves does not stop a load others may wait for
            await asyncio.shield(slot.loading)
        return slot.state

    async def _load(self, slot: ModelSlot) -> None:
        config = slot.config
        assert config is not None
        try:
            self._make_room(keep=slot)
            logger.info("loading %r", slot.name)
            started = time.monotonic()
            served = await asyncio.to_thread(config.load)
            served.name = slot.name
            slot.state = ModelState.build(
                served, self.settings, self.metrics, config.max_running, config.max_queue
            )
            self.metrics.loads.labels(slot.name).inc()
            logger.info("loaded %r in %.1f s", slot.name, time.monotonic() - started)
        finally:
            slot.loading = None

    def _make_room(self, keep: ModelSlot) -> None:
        """Unload idle models, the least recently used first, until one more fits `max_loaded`."""
        limit = self.settings.max_loaded
        if limit is None:
            return
        loaded = [s for s in self._slots.values() if s is not keep and (s.state or s.loading)]
        if self._unload_down_to(loaded, limit - 1) >= limit:
            logger.warning("loading %r beyond --max-loaded %d: every other model is in use", keep.name, limit)

    def _unload_down_to(self, loaded: list[ModelSlot], count: int) -> int:
        """Unload idle ones of `loaded`, the least recently used first, until `count` are left
        (or no idle one is); how many are left."""
        left = len(loaded)
        for victim in sorted((s for s in loaded if s.unloadable), key=lambda s: s.last_used):
            if left <= count:
                break
            self.unload(victim)
            left -= 1
        return left

    def unload(self, slot: ModelSlot) -> None:
        """Free an idle model's memory; it loads again at its next request."""
        state, slot.state = slot.state, None
        if state is None:
            return
        logger.info("unloading %r", slot.name)
        self.metrics.unloads.labels(slot.name).inc()
        state.close()

    def reap(self, now: float | None = None) -> None:
        """Unload what has been idle for `idle_unload_s`, and idle models beyond `max_loaded`."""
        now = time.monotonic() if now is None else now
        idle_s = self.settings.idle_unload_s
        if idle_s is not None:
            for slot in list(self._slots.values()):
                if slot.unloadable and now - slot.last_used >= idle_s:
                    self.unload(slot)
        if self.settings.max_loaded is not None:
            loaded = [s for s in self._slots.values() if s.state is not None]
            self._unload_down_to(loaded, self.settings.max_loaded)

    async def run_reaper(self) -> None:
        """Look at idle models every so often, for as long as the server runs."""
        if self.settings.idle_unload_s is None and self.settings.max_loaded is None:
            return
        interval = min(REAP_INTERVAL_S, (self.settings.idle_unload_s or REAP_INTERVAL_S) / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                self.reap()
            except Exception:
                logger.exception("unloading idle models failed")

    async def shutdown(self, grace_s: float) -> None:
        await asyncio.gather(*(state.shutdown(grace_s) for state in self.loaded()))


async def model_for(request: Request, name: str | None) -> ModelState:
    """The one resolver: the served model a request names (`model`, a serving endpoint's name;
    None: the default model), loaded and held until the request is answered."""
    return await get_state(request).models.lease(name, request.scope)


class ModelLeases:
    """Releases the models a request held once the app has answered it (a stream included)."""

    def __init__(self, app: ASGIApp, registry: ModelRegistry):
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        leases: list[ModelSlot] = []
        scope[LEASES_KEY] = leases
        try:
            await self.app(scope, receive, send)
        finally:
            for slot in leases:
                with contextlib.suppress(Exception):
                    self.registry.release(slot)
