"""llmflow as an MLflow model: log, register, load and stream.

    import mlflow, llmflow.mlflow
    info = llmflow.mlflow.log_model(name="model")        # the embedded SmolLM2 model
    loaded = mlflow.pyfunc.load_model(info.model_uri)
    for c in loaded.predict_stream({"prompt": "Hello!"}, params={"max_tokens": 32}):
        print(c["content"], end="")

`log_model(..., interface="responses")` logs it as an MLflow ResponsesAgent instead
(`LlmflowResponsesAgent`). Inside this package MLflow itself is imported with absolute imports
(`import mlflow`).
"""

from __future__ import annotations

from llmflow.mlflow.inputs import InvalidModelInput
from llmflow.mlflow.log import log_model
from llmflow.mlflow.model import LlmflowPyfuncModel, find_llm
from llmflow.mlflow.responses_agent import LlmflowResponsesAgent
from llmflow.mlflow.save import save_model

__all__ = [
    "InvalidModelInput",
    "LlmflowPyfuncModel",
    "LlmflowResponsesAgent",
    "find_llm",
    "log_model",
    "save_model",
]
