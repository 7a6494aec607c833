"""Fixtures for the MLflow model: one temporary tracking store and one logged model per session."""

from __future__ import annotations

from dataclasses import dataclass

import mlflow
import pytest

import llmflow.mlflow
from tests.mlflow.store import Store, using

REGISTERED_NAME = "smollm2"
ALIAS = "champion"
#: the logged default, small so that tests which pass no max_tokens stay fast
DEFAULT_MAX_TOKENS = 12
#: the registered name of the embedded model logged as a ResponsesAgent
AGENT_NAME = "assistant"


@dataclass(frozen=True)
class Logged:
    model_uri: str
    run_id: str
    version: str
    store: Store


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store.create(tmp_path_factory.mktemp("mlflow"))


@pytest.fixture
def tracking(mlflow_store: Store):
    """The test talks to the temporary store (never to a user's mlruns)."""
    with using(mlflow_store):
        yield mlflow_store


@pytest.fixture(scope="session")
def logged(mlflow_store: Store) -> Logged:
    """The embedded model, logged once, registered, with an alias."""
    with using(mlflow_store), mlflow.start_run(experiment_id=mlflow_store.experiment_id) as run:
        info = llmflow.mlflow.log_model(
            "model",
            registered_model_name=REGISTERED_NAME,
            default_params={"max_tokens": DEFAULT_MAX_TOKENS},
        )
        mlflow.MlflowClient().set_registered_model_alias(
            REGISTERED_NAME, ALIAS, info.registered_model_version
        )
    return Logged(info.model_uri, run.info.run_id, str(info.registered_model_version), mlflow_store)


@pytest.fixture(scope="session")
def loaded(logged: Logged):
    """The logged model loaded back through `mlflow.pyfunc.load_model`, once per session."""
    with using(logged.store):
        model = mlflow.pyfunc.load_model(logged.model_uri)
    yield model
    llm = llmflow.mlflow.find_llm(model)
    if llm is not None:
        llm.close()


@pytest.fixture(scope="session")
def logged_agent(mlflow_store: Store):
    """The embedded model logged (copied, as by default) as a ResponsesAgent, and registered."""
    with using(mlflow_store), mlflow.start_run(experiment_id=mlflow_store.experiment_id):
        return llmflow.mlflow.log_model(
            "agent",
            interface="responses",
            registered_model_name=AGENT_NAME,
            default_params={"max_tokens": DEFAULT_MAX_TOKENS},
        )
