"""A plain third-party MLflow pyfunc model with its own `predict_stream` (nothing from llmflow)."""

from __future__ import annotations

import warnings
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, DataType, ParamSchema, ParamSpec, Schema

SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec(DataType.string, "prompt")]),
    outputs=Schema([ColSpec(DataType.string)]),
    params=ParamSchema([ParamSpec("shout", DataType.boolean, False)]),
)


def _prompts(model_input: Any) -> list[str]:
    if isinstance(model_input, pd.DataFrame):
        return [str(p) for p in model_input["prompt"]]
    if isinstance(model_input, dict):
        prompt = model_input["prompt"]
        return [str(p) for p in prompt] if isinstance(prompt, list) else [str(prompt)]
    return [str(p) for p in model_input]


# MLflow advises type hints when the class is defined; WordEcho leaves them out on purpose (MLflow
# would read them as a signature), like many third-party models.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*Add type hints", category=UserWarning)

    class WordEcho(mlflow.pyfunc.PythonModel):
        """Answers each prompt with itself (upper-cased with `shout`); streams it one word a chunk.

        The word FAIL makes the stream break after the words before it; the prompt "refuse" fails
        before the first chunk."""

        def predict(self, context, model_input, params=None):
            shout = bool((params or {}).get("shout"))
            return [p.upper() if shout else p for p in _prompts(model_input)]

        def predict_stream(self, context, model_input, params=None):
            (prompt,) = _prompts(model_input)
            if prompt == "refuse":
                raise ValueError("this model refuses that prompt")
            shout = bool((params or {}).get("shout"))
            for index, word in enumerate(prompt.split()):
                if word == "FAIL":
                    raise RuntimeError("the model broke mid-stream")
                yield {"index": index, "word": word.upper() if shout else word}


def save_and_load(path: str) -> Any:
    """Saved and loaded the way any MLflow user does it."""
    example = pd.DataFrame({"prompt": ["a b"]})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Add type hints", category=UserWarning)
        mlflow.pyfunc.save_model(path, python_model=WordEcho(), signature=SIGNATURE, input_example=example)
        return mlflow.pyfunc.load_model(path)
