"""The model registry's rules on their own, with models that load instantly (no engine): one load
for concurrent first requests, a held model is never unloaded, idle ones go least recently used
first. The same rules through a real server: test_several_models.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from llmflow.errors import InvalidParams, UnknownModel
from llmflow.server.metrics import ServerMetrics
from llmflow.server.model_config import ModelConfig
from llmflow.server.model_registry import LEASES_KEY, ModelRegistry
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings


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
