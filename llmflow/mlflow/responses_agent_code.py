"""The code MLflow runs to build an llmflow ResponsesAgent when it loads one (models-from-code).

A logged llmflow model holds a copy of this file instead of a pickled object: loading imports
llmflow and rebuilds the LLM from the MLmodel's `model_config`, so no engine is ever unpickled.
"""

import mlflow

from llmflow.mlflow.responses_agent import LlmflowResponsesAgent

mlflow.models.set_model(LlmflowResponsesAgent())
