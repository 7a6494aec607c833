"""When llmflow records MLflow traces. Off unless asked, or unless an MLflow experiment was chosen.

The first explicit choice wins, most specific first:

1. a call's `trace` param (`predict`, `predict_stream`, `/invocations`);
2. the model's `tracing` (`log_model(..., tracing=True)`, stored in its `model_config`), or the
   server's `llmflow serve --tracing / --no-tracing`;
3. otherwise *auto*: on while an MLflow span is active in this thread (llmflow's span then nests
   in that trace), for a server's request whose sampled `traceparent` names the caller's span
   (continued there, `propagation`), or when an experiment was chosen explicitly: `mlflow.set_experiment(...)`
   (which sets `MLFLOW_EXPERIMENT_ID`) or `MLFLOW_EXPERIMENT_ID` / `MLFLOW_EXPERIMENT_NAME` in
   the environment. Off otherwise, so a model that just streams never writes to a tracking store.

MLflow's own switch still applies: after `mlflow.tracing.disable()` nothing is recorded.
"""

from __future__ import annotations

import os

EXPERIMENT_ID_ENV = "MLFLOW_EXPERIMENT_ID"
EXPERIMENT_NAME_ENV = "MLFLOW_EXPERIMENT_NAME"


def tracing_wanted(*choices: bool | None) -> bool:
    """The first of `choices` that is not None, else the auto rule."""
    for choice in choices:
        if choice is not None:
            return choice
    if os.environ.get(EXPERIMENT_ID_ENV) or os.environ.get(EXPERIMENT_NAME_ENV):  # an experiment chosen
        return True
    import mlflow

    return mlflow.get_current_active_span() is not None  # a span active in this thread


def trace_experiment_id() -> str | None:
    """The experiment of a new trace when MLflow would take it from `MLFLOW_EXPERIMENT_ID`.

    MLflow looks that id up in the tracking store for every trace it starts (a query, tens of
    milliseconds on sqlite, before the first token); passing it explicitly skips the lookup. None
    leaves the choice to MLflow (an active run, an experiment name, the default experiment)."""
    import mlflow

    experiment_id = os.environ.get(EXPERIMENT_ID_ENV)
    if not experiment_id or os.environ.get(EXPERIMENT_NAME_ENV) or mlflow.active_run() is not None:
        return None
    return experiment_id
