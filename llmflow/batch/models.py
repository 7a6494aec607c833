"""MODEL of `llmflow batch`: a model URI, a saved MLflow model directory, or a weights file.

Weights (a GGUF file or a model directory) are saved as a temporary local MLflow model first,
so that both paths run the same logged-model code: by reference on this machine (nothing
copied), with the weights copied in for a cluster, whose executors cannot see local paths.
"""

from __future__ import annotations

from pathlib import Path

from llmflow.errors import ModelNotFound

MLMODEL = "MLmodel"


def model_uri(model: str, workdir: Path, *, copy_weights: bool = False) -> str:
    """A URI `mlflow.pyfunc.load_model` and `spark_udf` accept for `model`."""
    if ":/" in model and not Path(model).exists():
        return model  # runs:/..., models:/..., s3://..., file:/...
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFound(
            f"{model!r} is neither a model URI (runs:/..., models:/...) nor an existing file or directory"
        )
    if (path / MLMODEL).is_file():
        return str(path.resolve())
    from llmflow.mlflow import save_model

    saved = workdir / "model"
    save_model(saved, path, by_reference=not copy_weights)
    return str(saved)
