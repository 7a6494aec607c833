"""Logging an llmflow model to the MLflow tracking server (and its registry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmflow.mlflow.save import ModelSource, model_source, save_source
from llmflow.mlflow.signature import INPUT_EXAMPLE


class _Flavor:
    """What `mlflow.models.Model.log` calls to write the model into its temporary directory."""

    __name__ = "mlflow.pyfunc"  # the logged model is a plain pyfunc model

    def __init__(self, source: ModelSource):
        self.source = source

    def save_model(self, path: str, mlflow_model: Any, **kwargs: Any) -> None:
        kwargs.pop("validate_serving_input", None)  # read by Model.log itself
        save_source(path, self.source, mlflow_model=mlflow_model, **kwargs)


def log_model(
    name: str = "model",
    model: str | Path | None = None,
    *,
    registered_model_name: str | None = None,
    await_registration_for: int = 300,
    pip_requirements: list[str] | None = None,
    extra_pip_requirements: list[str] | None = None,
    input_example: Any = INPUT_EXAMPLE,
    metadata: dict[str, Any] | None = None,
    tags: dict[str, Any] | None = None,
    progress: bool | None = None,
    **options: Any,
) -> Any:
    """Log an llmflow model to the active run (or as a run-less logged model); return MLflow's
    `ModelInfo` (its `model_uri` loads with `mlflow.pyfunc.load_model`).

    `options` are those of `save_model`: the fields of `LoadSpec`, by_reference, tracing and
    interface. The model is not loaded while logging (MLflow's serving-input check would load the
    weights and generate).
    """
    from mlflow.models import Model

    source = model_source(model, **options)
    return Model.log(
        artifact_path=None,
        name=name,
        flavor=_Flavor(source),
        registered_model_name=registered_model_name,
        await_registration_for=await_registration_for,
        tags=tags,
        params={"engine": source.spec.engine, "model_name": source.spec.model_name},
        validate_serving_input=False,
        pip_requirements=pip_requirements,
        extra_pip_requirements=extra_pip_requirements,
        input_example=input_example,
        metadata=metadata,
        progress=progress,
    )
