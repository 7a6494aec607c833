"""The model registry's rules on their own, with models that load instantly (no engine): one load
for concurrent first requests, a held model is never unloaded, idle ones go least recently used
first. The same rules through a real server: test_several_models.py."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from llmflow.errors import InvalidParams, ModelTooLarge, UnknownModel
from llmflow.server.metrics import ServerMetrics
from llmflow.server.model_config import ModelConfig
from llmflow.server.model_registry import LEASES_KEY, ModelRegistry
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings
from tests.server.conftest import metric


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every load, by name; a load takes a moment, so concurrent first requests overlap it."""
    done: list[str] = []
    gate = threading.Event()

    def load(self: ModelConfig) -> ServedModel:
        gate.wait(0.2)
        done.append(self.name or "")
        return ServedModel(self.name or "")

    monkeypatch.setattr(ModelConfig, "load", load)
    return done


def registry(**settings: Any) -> ModelRegistry:
    configs = [ModelConfig(name=name) for name in ("a", "b", "c")]
    return ModelRegistry.build(configs, ServerSettings(lazy=True, **settings), ServerMetrics())


def release_all(models: ModelRegistry, scope: dict[str, Any]) -> None:
    for slot in scope.pop(LEASES_KEY):
        models.release(slot)


def test_concurrent_first_requests_share_one_load(loads):
    models = registry()

    async def main() -> None:
        scopes: list[dict[str, Any]] = [{} for _ in range(5)]
        states = await asyncio.gather(*(models.lease("b", scope) for scope in scopes))
        assert len({id(state) for state in states}) == 1 and states[0].name == "b"
        assert all(scope["llmflow.model"] == "b" for scope in scopes)

    asyncio.run(main())
    assert loads == ["b"]
    assert models.default.name == "a" and models.default.state is None  # never asked for


def test_a_held_model_is_never_unloaded_and_an_idle_one_is(loads):
    models = registry(idle_unload_s=10)

    async def main() -> None:
        held: dict[str, Any] = {}
        await models.lease("a", held)
        models.reap(now=models.slot("a").last_used + 1000)
        assert models.slot("a").state is not None  # held: stays
        release_all(models, held)
        models.reap(now=models.slot("a").last_used + 5)
        assert models.slot("a").state is not None  # idle, not for long enough
        models.reap(now=models.slot("a").last_used + 10)
        assert models.slot("a").state is None
        again: dict[str, Any] = {}
        await models.lease("a", again)

    asyncio.run(main())
    assert loads == ["a", "a"]


def test_beyond_max_loaded_the_least_recently_used_idle_model_goes(loads):
    models = registry(max_loaded=2)

    async def main() -> None:
        for name in ("a", "b"):
            scope: dict[str, Any] = {}
            await models.lease(name, scope)
            release_all(models, scope)
        held: dict[str, Any] = {}
        await models.lease("a", held)  # a is now the most recently used, and held
        scope = {}
        await models.lease("c", scope)
        assert [s.name for s in (models.slot(n) for n in "abc") if s.state is not None] == ["a", "c"]
        # every other model in use: the new one loads anyway, and the limit comes back once idle
        await models.lease("b", {})
        assert sum(models.slot(n).state is not None for n in "abc") == 3
        release_all(models, held)
        release_all(models, scope)
        models.reap()
        assert sum(models.slot(n).state is not None for n in "abc") == 2

    asyncio.run(main())


def test_unknown_and_duplicate_names():
    models = registry()
    with pytest.raises(UnknownModel) as unknown:
        models.slot("nope")
    assert unknown.value.param == "model" and "'a', 'b', 'c'" in str(unknown.value)
    assert models.slot(None).name == "a"
    with pytest.raises(InvalidParams, match="'a' names two models"):
        ModelRegistry.build([ModelConfig(name="a")] * 2, ServerSettings(lazy=True), ServerMetrics())


# -- the memory budget -------------------------------------------------------------------------------
@pytest.fixture
def sized(monkeypatch) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """Models whose estimate once loaded (`after`) and weights on disk (`before`) a test sets, by
    name; every load, by name."""
    after: dict[str, int] = {}
    before: dict[str, int] = {}
    done: list[str] = []

    def load(self: ModelConfig) -> ServedModel:
        name = self.name or ""
        done.append(name)
        engine = SimpleNamespace(
            max_concurrency=1,
            memory_bytes=lambda: after[name],
            stats=lambda: None,
            cache_stats=lambda: None,
            speculation_stats=lambda: None,
            image_stats=lambda: None,
            next_turn_tokens_computed=lambda: None,
            persist=lambda: None,
        )
        return ServedModel(name, llm=SimpleNamespace(engine=engine, close=lambda: None))  # type: ignore[arg-type]

    monkeypatch.setattr(ModelConfig, "load", load)
    monkeypatch.setattr(
        "llmflow.server.model_registry.weights_on_disk", lambda config: before.get(config.name, 0)
    )
    return after, before, done


def loaded_names(models: ModelRegistry) -> list[str]:
    return [name for name in models.names if models.slot(name).state is not None]


def test_beyond_max_memory_the_least_recently_used_idle_models_go(sized):
    after, _, _ = sized
    after.update(a=40, b=40, c=40)
    models = registry(max_memory=100)

    async def main() -> None:
        for name in ("a", "b"):
            scope: dict[str, Any] = {}
            await models.lease(name, scope)
            release_all(models, scope)
        held: dict[str, Any] = {}
        await models.lease("a", held)  # the most recently used, and held
        c: dict[str, Any] = {}
        await models.lease("c", c)
        assert loaded_names(models) == ["a", "c"]  # b made room: idle, least recently used
        # every other model in use: the new one loads anyway, and the budget comes back once idle
        await models.lease("b", {})
        assert loaded_names(models) == ["a", "b", "c"]
        release_all(models, held)
        release_all(models, c)
        models.reap()
        assert loaded_names(models) == ["b", "c"] and models.slot("b").memory_bytes == 40

    asyncio.run(main())


def test_a_model_known_after_its_load_to_be_larger_than_the_budget_is_refused(sized):
    after, before, loads = sized
    after.update(a=30, b=150)
    before.update(b=60)  # its weights fit; its KV cache, sized at load, does not
    models = registry(max_memory=100)

    async def main() -> None:
        await models.lease("a", {})
        for _ in range(2):
            with pytest.raises(ModelTooLarge) as refused:
                await models.lease("b", {})
            assert refused.value.param == "model" and "'b' needs about" in str(refused.value)
        assert loaded_names(models) == ["a"]  # nothing made room for a model that cannot load

    asyncio.run(main())
    assert loads == ["a", "b"]  # loaded once to learn its size, never again


def test_a_model_whose_weights_are_larger_than_the_budget_is_never_loaded(sized):
    _, before, loads = sized
    before.update(c=500)
    with pytest.raises(ModelTooLarge, match="--max-memory"):
        asyncio.run(registry(max_memory=100).lease("c", {}))
    assert loads == []
    # loading at start: the same refusal, before anything of that model loads
    with pytest.raises(ModelTooLarge):
        ModelRegistry.build([ModelConfig(name="c")], ServerSettings(max_memory=100), ServerMetrics())
    assert loads == []


def test_at_start_models_load_in_turn_within_the_budget(sized):
    after, _, loads = sized
    after.update(a=60, b=60)
    configs = [ModelConfig(name=name) for name in ("a", "b")]
    models = ModelRegistry.build(configs, ServerSettings(max_memory=100), ServerMetrics())
    assert loads == ["a", "b"] and loaded_names(models) == ["b"]  # a made room for b
    text = models.metrics.exposition().decode()
    assert metric(text, "llmflow_model_unloads_total", model="a") == 1
    assert metric(text, "llmflow_model_memory_bytes", model="b") == 60
    assert metric(text, "llmflow_model_memory_bytes", model="a") == 0
