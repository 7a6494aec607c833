"""The models one server serves, by name, and the one resolver every route asks for a model.

Each model has a slot: its name, how to load it (a `ModelConfig`; None for a model handed over
loaded, which is never unloaded), its `ModelState` while loaded, and the requests that hold it.
`model_for(request, name)` finds the slot (an unknown name is a 404 naming `model`; None is the
default model, the first), loads it when it is not loaded (one load, however many requests ask
at once) and holds it until the request's answer is over (`ModelLeases`, an ASGI middleware).
A model that a request holds, or that runs or queues a generation, is never unloaded; idle ones
are, the least recently used first, beyond `max_loaded`, beyond the memory budget `max_memory`
(each model counted by its estimate, see `server/memory.py`), and after `idle_unload_s` without a
request. A model whose estimate alone is over the budget is refused (`ModelTooLarge`), at start
or at its first request, and never loaded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from llmflow.errors import UnknownAdapter, UnknownModel
from llmflow.server.memory import format_size, loaded_bytes, too_large, weights_on_disk
from llmflow.server.metrics import ModelLoad, ServerMetrics
from llmflow.server.model_config import ModelConfig, check_unique
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings
from llmflow.server.state import SHUTDOWN_GRACE_S, ModelState, get_state

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
        #: what it counts for against the memory budget: its estimate at its last load, else
        #: its weights' size on disk
        self.memory_bytes = 0

    @property
    def unloadable(self) -> bool:
        """Loaded from a config, and idle: no request holds it, none of its generations runs or waits."""
        return self.config is not None and self.state is not None and self.leases == 0 and not self.state.busy

    @property
    def engine_name(self) -> str | None:
        if self.state is not None:
            return self.state.served.engine_name
        return self.config.engine if self.config is not None else None

    @property
    def counted(self) -> bool:
        """It takes memory now, or will once its load is over."""
        return self.state is not None or self.loading is not None

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
            cache_stats=engine.cache_stats() if engine is not None else None,
            speculation=engine.speculation_stats() if engine is not None else None,
            images=engine.image_stats() if engine is not None else None,
            next_turn_tokens=engine.next_turn_tokens_computed() if engine is not None else None,
            memory_bytes=self.memory_bytes,
        )


def total_bytes(slots: Iterable[ModelSlot]) -> int:
    return sum(slot.memory_bytes for slot in slots)


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
        """Models handed over loaded are served as they are; configs are loaded now, in order and
        within the server's limits (unless the server loads lazily: then at their first request)."""
        slots = []
        for model in models:
            if isinstance(model, ServedModel):
                slot = ModelSlot(model.name, None, ModelState.build(model, settings, metrics))
                slot.memory_bytes = loaded_bytes(model) or 0
                metrics.loads.labels(model.name).inc()
            else:
                slot = ModelSlot(model.expected_name(), model)
                slot.memory_bytes = weights_on_disk(model) if settings.max_memory is not None else 0
            slots.append(slot)
        if not slots:
            raise ValueError("a server needs at least one model")
        registry = cls(slots, settings, metrics)
        if not settings.lazy:
            for slot in slots:
                if slot.state is None:
                    registry._load_now(slot)
        return registry

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
        if found is None and ":" in name:  # BASE:ADAPTER, a LoRA adapter of a served model
            found = self._slots.get(name.rsplit(":", 1)[0])
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
            self._install(slot, served)
            logger.info("loaded %r in %.1f s", slot.name, time.monotonic() - started)
        finally:
            slot.loading = None

    def _load_now(self, slot: ModelSlot) -> None:
        """`_load` on the caller's thread: the models a server loads at start."""
        assert slot.config is not None
        self._make_room(keep=slot)
        self._install(slot, slot.config.load())

    def _install(self, slot: ModelSlot, served: ServedModel) -> None:
        """Serve a model just loaded; with its estimate now known, one over the budget on its own
        is unloaded again and refused, else idle others make room for it."""
        config = slot.config
        assert config is not None
        served.name = slot.name
        slot.state = ModelState.build(
            served, self.settings, self.metrics, config.max_running, config.max_queue
        )
        self.metrics.loads.labels(slot.name).inc()
        slot.memory_bytes = loaded_bytes(served) or slot.memory_bytes
        budget = self.settings.max_memory
        if budget is not None and slot.memory_bytes > budget:
            self.unload(slot)
            raise too_large(slot.name, slot.memory_bytes, budget)
        self._make_room(keep=slot, warn=False)  # warned before the load already

    def _make_room(self, keep: ModelSlot, *, warn: bool = True) -> None:
        """Unload idle models, the least recently used first, until `keep` fits beside the others
        within `max_loaded` and `max_memory`; a model too large for the budget on its own is
        `ModelTooLarge`. When every other model is in use, `keep` is loaded anyway (with a
        warning): the limits come back as models fall idle."""
        limit, budget = self.settings.max_loaded, self.settings.max_memory
        if budget is not None and keep.memory_bytes > budget:
            raise too_large(keep.name, keep.memory_bytes, budget)
        others = self._fit([s for s in self._slots.values() if s is not keep and s.counted], keep)
        if warn and limit is not None and len(others) >= limit:
            logger.warning("loading %r beyond --max-loaded %d: every other model is in use", keep.name, limit)
        if warn and budget is not None and total_bytes(others) + keep.memory_bytes > budget:
            logger.warning(
                "loading %r beyond --max-memory %s: the other models in use take %s",
                keep.name,
                format_size(budget),
                format_size(total_bytes(others)),
            )

    def _fit(self, slots: list[ModelSlot], keep: ModelSlot | None = None) -> list[ModelSlot]:
        """Unload idle ones of `slots`, the least recently used first, until they fit within
        `max_loaded` and `max_memory` (beside `keep`, when given) or no idle one is left; what is
        left."""
        limit, budget = self.settings.max_loaded, self.settings.max_memory
        count, size = (0, 0) if keep is None else (1, keep.memory_bytes)
        left = list(slots)
        for victim in sorted((s for s in slots if s.unloadable), key=lambda s: s.last_used):
            too_many = limit is not None and len(left) + count > limit
            over_budget = budget is not None and total_bytes(left) + size > budget
            if not (too_many or over_budget):
                break
            self.unload(victim)
            left.remove(victim)
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
        """Unload what has been idle for `idle_unload_s`, and idle models beyond `max_loaded` and
        `max_memory` (models loaded while every other one was in use)."""
        now = time.monotonic() if now is None else now
        settings = self.settings
        if settings.idle_unload_s is not None:
            for slot in list(self._slots.values()):
                if slot.unloadable and now - slot.last_used >= settings.idle_unload_s:
                    self.unload(slot)
        self._fit([s for s in self._slots.values() if s.state is not None])

    async def run_reaper(self) -> None:
        """Look at idle models every so often, for as long as the server runs."""
        settings = self.settings
        if settings.idle_unload_s is None and settings.max_loaded is None and settings.max_memory is None:
            return
        interval = min(REAP_INTERVAL_S, (self.settings.idle_unload_s or REAP_INTERVAL_S) / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                self.reap()
            except Exception:
                logger.exception("unloading idle models failed")

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        await asyncio.gather(*(state.shutdown(grace_s) for state in self.loaded()))


def adapter_named(name: str | None, served: str) -> str | None:
    """The LoRA adapter a request's `model` names as `served:ADAPTER`, else None."""
    if name is None or name == served or not name.startswith(f"{served}:"):
        return None
    return name[len(served) + 1 :]


def adapter_param(state: ModelState, model: str | None, lora: str | None = None) -> dict[str, str]:
    """The `lora` param a request's `model` adds when it names one of the served model's LoRA
    adapters as BASE:ADAPTER: `{"lora": ADAPTER}`; else {} (no adapter named, or the request's
    own `lora` names one: that one wins). Every route that takes `model` asks here, so an
    adapter the model has not loaded is `UnknownAdapter` naming `model` on each of them."""
    adapter = adapter_named(model, state.served.name)
    if adapter is None or lora is not None:
        return {}
    llm = state.served.llm
    loaded = llm.engine.lora_names if llm is not None else ()
    if adapter not in loaded:
        raise UnknownAdapter(adapter, list(loaded), field="model")
    return {"lora": adapter}


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
