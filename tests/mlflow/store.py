"""A real MLflow tracking store (sqlite + local artifacts) in a temporary directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import mlflow


@dataclass(frozen=True)
class Store:
    root: Path
    experiment_id: str

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    @classmethod
    def create(cls, root: Path, experiment: str = "tests") -> Store:
        """A store whose artifacts also live under `root` (never in ./mlruns)."""
        uri = f"sqlite:///{root / 'mlflow.db'}"
        artifacts = root / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        experiment_id = client.create_experiment(experiment, artifact_location=artifacts.as_uri())
        return cls(root, experiment_id)


@contextmanager
def using(store: Store) -> Iterator[Store]:
    """Point MLflow (and subprocesses, through the environment) at `store`, then back."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(store.uri)
    try:
        yield store
    finally:
        mlflow.set_tracking_uri(previous)
