"""Bad model input as MLflow sees it: an `MlflowException` that still carries the llmflow error.

MLflow's scoring server answers `INVALID_PARAMETER_VALUE` with HTTP 400; llmflow's own server
maps `.error` by its class, like any other llmflow error.
"""

from __future__ import annotations

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from llmflow.errors import LlmflowError


class InvalidModelInput(MlflowException):
    """A request the model refuses (bad input, params, messages, or a prompt too long)."""

    def __init__(self, error: LlmflowError):
        super().__init__(str(error), error_code=INVALID_PARAMETER_VALUE)
        self.error = error
