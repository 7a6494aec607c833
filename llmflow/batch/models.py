"""MODEL of `llmflow batch` (see `llmflow.mlflow.model_ref`) as a model URI for `spark_udf`.

Weights (a GGUF file, a model directory, or a Hub model, downloaded first) are saved as a
temporary local MLflow model first, so that both paths run the same logged-model code: by
reference on this machine (nothing copied), with the weights copied in for a cluster, whose
executors cannot see local paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmflow.errors import InvalidParams, ModelNotFound


@dataclass(frozen=True)
class BatchModel:
    """MODEL and the engine options it loads with (`--engine-option`), saved under `workdir`
    when it is weights rather than a logged model."""

    model: str
    engine_options: dict[str, Any] = field(default_factory=dict)
    workdir: Path = Path(".")

    def uri(self, *, copy_weights: bool = False) -> str:
        return model_uri(
            self.model, self.workdir, copy_weights=copy_weights, engine_options=self.engine_options
        )


def model_uri(
    model: str, workdir: Path, *, copy_weights: bool = False, engine_options: dict[str, Any] | None = None
) -> str:
    """A URI `mlflow.pyfunc.load_model` and `spark_udf` accept for `model`; `engine_options`
    apply to weights only (a logged model keeps those it was logged with: any here is refused)."""
    from llmflow.mlflow.model_ref import parse_model_ref

    ref = parse_model_ref(model)
    assert ref.location is not None
    if ref.logged:
        if engine_options:
            raise InvalidParams.single(
                "--engine-option",
                f"{model!r} is a logged model, which loads with the engine options it was logged with; "
                "log it again with the options (llmflow log --engine-option), or give its weights",
            )
        return ref.location
    path = Path(ref.location)
    if ref.hub is None and not path.exists():
        raise ModelNotFound(
            f"{model!r} is neither a model URI (runs:/..., models:/...) nor an existing file or directory"
        )
    from llmflow.mlflow import save_model

    saved = workdir / "model"
    save_model(
        saved,
        ref.location if ref.hub is not None else path,
        by_reference=not copy_weights,
        engine_options=engine_options or {},
    )
    return str(saved)
