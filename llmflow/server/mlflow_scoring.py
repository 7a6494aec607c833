"""MLflow's own scoring-server code, used rather than copied, so /invocations parses input and
formats output exactly as `mlflow models serve` does. Every use of MLflow's private helpers is
here, in one place."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.models.utils import _convert_llm_input_data
from mlflow.protos.databricks_pb2 import BAD_REQUEST
from mlflow.pyfunc import _validate_prediction_input, scoring_server
from mlflow.pyfunc.utils.serving_data_parser import is_unified_llm_input
from mlflow.utils.proto_json_utils import NumpyEncoder

logger = logging.getLogger(__name__)

JSON = scoring_server.CONTENT_TYPE_JSON
CONTENT_TYPES = tuple(scoring_server.CONTENT_TYPES)
UNEXPECTED_ERROR = (
    "Encountered an unexpected error while evaluating the model. Verify that the input is compatible "
    "with the model for inference."
)


@dataclass(frozen=True)
class ScoringAnswer:
    body: str
    status: int
    media_type: str


def predict(model: Any, data: Any, content_type: str) -> ScoringAnswer:
    """`model.predict` through MLflow's scoring function: JSON/CSV/Parquet in, MLflow's JSON out
    (`{"predictions": ...}`, or unwrapped for LLM bodies with `prompt`/`messages`/`input`)."""
    answer = scoring_server.invocations(data, content_type, model, model.metadata.get_input_schema())
    return ScoringAnswer(answer.response, answer.status, answer.mimetype)


def predict_stream(model: Any, payload: dict[str, Any]) -> Iterator[Any]:
    """`model.predict_stream` on a JSON body parsed as MLflow parses it for `predict`.

    The model (and MLflow's schema checks) run at the iterator's first `next()`."""
    data, params = _parsed_single(model, payload)
    return model.predict_stream(data, params=params)


def stream_input(model: Any, payload: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """A JSON body as `model.predict_stream` hands it to the Python model: parsed as for
    `predict`, checked against the model's signature and turned into one LLM input, as
    `PyFuncModel.predict_stream` does; so that the server can stream an llmflow model itself."""
    data, params = _parsed_single(model, payload)
    metadata = model.metadata
    data, params = _validate_prediction_input(
        data, params, metadata.get_input_schema(), metadata.get_params_schema(), model.loader_module
    )
    data = _convert_llm_input_data(data)
    if isinstance(data, list):  # schema enforcement may wrap the one input in a list
        if len(data) != 1:
            raise MlflowException(
                f"a stream answers exactly one input; got {len(data)}", error_code=BAD_REQUEST
            )
        data = data[0]
    return data, params


def _parsed_single(model: Any, payload: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    input_schema = model.metadata.get_input_schema()
    parsed = scoring_server._parse_json_data(payload, model.metadata, input_schema)
    rows = _row_count(parsed.data)
    if rows is not None and rows != 1:  # MLflow refuses this too, but as an internal error (500)
        raise MlflowException(f"a stream answers exactly one input row; got {rows}", error_code=BAD_REQUEST)
    return parsed.data, parsed.params


def _row_count(data: Any) -> int | None:
    import pandas as pd

    if isinstance(data, (pd.DataFrame, list)):
        return len(data)
    return None


def flatten_llm_params(payload: dict[str, Any]) -> dict[str, Any]:
    """For `prompt`/`messages` bodies MLflow reads params from top-level keys; a `params` object
    is accepted too (its keys apply unless the same key is also at the top level)."""
    params = payload.get("params")
    if not is_unified_llm_input(payload) or not isinstance(params, dict):
        return payload
    rest = {k: v for k, v in payload.items() if k != "params"}
    return {**params, **rest}


def error_body(error: MlflowException) -> str:
    """MLflow's error shape, without the stack trace MLflow's own server sends."""
    return json.dumps({"error_code": error.error_code, "message": error.message})


def as_mlflow_error(error: Exception) -> MlflowException:
    """What MLflow's server answers for an exception a model raised."""
    if isinstance(error, MlflowException):
        return error
    logger.error("the model raised an error", exc_info=error)
    return MlflowException(UNEXPECTED_ERROR, error_code=BAD_REQUEST)


def chunk_json(chunk: Any) -> str:
    """One `predict_stream` chunk as JSON (dicts, strings, numpy values, MLflow's chunk classes)."""
    to_dict = getattr(chunk, "to_dict", None)
    if to_dict is not None:
        chunk = to_dict()
    return json.dumps(chunk, cls=NumpyEncoder, ensure_ascii=False, separators=(",", ":"))
