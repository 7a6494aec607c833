"""A real MLflow tracking store (sqlite in a temp dir) for trace tests, one fresh experiment per
test, and helpers that read back what was recorded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import mlflow
import pytest

from tests.mlflow.store import Store, using

#: how long to wait for a trace that a server ends after its response
TRACE_WAIT_S = 60


@dataclass(frozen=True)
class Experiment:
    store: Store
    experiment_id: str

    def traces(self, expected: int | None = None, timeout_s: float = TRACE_WAIT_S) -> list:
        """The experiment's traces, once `expected` of them are there (or the time is up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = traces_in(self.experiment_id)
            if expected is None or len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


def traces_in(experiment_id: str) -> list:
    mlflow.flush_trace_async_logging()
    return mlflow.search_traces(locations=[experiment_id], return_type="list")


def all_trace_count() -> int:
    """Traces in every experiment of the current store."""
    experiments = mlflow.MlflowClient().search_experiments()
    return sum(len(traces_in(e.experiment_id)) for e in experiments)


@pytest.fixture(scope="session")
def trace_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store.create(tmp_path_factory.mktemp("traces"))


@pytest.fixture
def store(trace_store: Store) -> Iterator[Store]:
    """The trace store as MLflow's tracking store, with no experiment chosen (tracing's auto
    rule is off)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
        patch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        with using(trace_store):
            yield trace_store
            mlflow.flush_trace_async_logging()


@pytest.fixture
def experiment(store: Store, request: pytest.FixtureRequest) -> Iterator[Experiment]:
    """A fresh experiment chosen as `mlflow.set_experiment` would (MLFLOW_EXPERIMENT_ID), which
    turns tracing's auto rule on."""
    name = f"{request.node.name}-{time.monotonic_ns()}"
    experiment_id = mlflow.MlflowClient().create_experiment(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_EXPERIMENT_ID", experiment_id)
        yield Experiment(store, experiment_id)


def only_span(trace) -> object:
    assert len(trace.data.spans) == 1, [s.name for s in trace.data.spans]
    return trace.data.spans[0]
