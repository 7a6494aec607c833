"""MODEL of `llmflow batch` (see `llmflow.mlflow.model_ref`) as a model URI for `spark_udf`.

Weights (a GGUF file, a model directory, or a Hub model, downloaded first) are saved as a
temporary local MLflow model first, so that both paths run the same logged-model code: by
reference on this machine (nothing copied), with the weights copied in for a cluster, whose
executors cannot see local paths.
"""

from __future__ import annotations

from pathlib import Path

from llmflow.errors import ModelNotFound


def model_uri(model: str, workdir: Path, *, copy_weights: bool = False) -> str:
    """A URI `mlflow.pyfunc.load_model` and `spark_udf` accept for `model`."""
    from llmflow.mlflow.model_ref import parse_model_ref

    ref = parse_model_ref(model)
    assert ref.location is not None
    if ref.logged:
        return ref.location
    path = Path(ref.location)
    if ref.hub is None and not path.exists():
        raise ModelNotFound(
            f"{model!r} is neither a model URI (runs:/..., models:/...) nor an existing file or directory"
        )
    from llmflow.mlflow import save_model

    saved = workdir / "model"
    save_model(saved, ref.location if ref.hub is not None else path, by_reference=not copy_weights)
    return str(saved)
