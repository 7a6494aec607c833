"""POST /invocations: MLflow's scoring protocol, as `mlflow models serve` answers it, plus
streaming: with `"stream": true` the answer is `text/event-stream`, one `data: <chunk json>` per
`predict_stream` chunk, then `data: [DONE]` (the format Databricks Model Serving uses).

Errors from the model keep MLflow's shape (`{"error_code", "message"}`) and status, as MLflow
clients expect; the server's own refusals (key, limits, queue) use the OpenAI shape everywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from mlflow.exceptions import MlflowException

from llmflow.errors import InvalidRequest, LlmflowError, UnsupportedEndpoint
from llmflow.server import mlflow_scoring
from llmflow.server.errors import error_body, error_response, llmflow_error_body
from llmflow.server.generation import Generation, Summary, start_generation
from llmflow.server.schemas import SSE_DESCRIPTION, error_responses
from llmflow.server.sse import DONE, StreamResponse, event
from llmflow.server.state import ServerState, get_state
from llmflow.server.timings import RequestTimings

logger = logging.getLogger(__name__)

router = APIRouter(tags=["MLflow"])

_INLINE_JSON_BYTES = 64 * 1024  # larger bodies are parsed in a thread

_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": (
                    "One of `dataframe_split`, `dataframe_records`, `instances`, `inputs` (with optional "
                    "`params`), or an LLM body with `prompt` or `messages` and params as top-level keys; "
                    "`stream: true` streams `predict_stream`."
                ),
                "properties": {"stream": {"type": "boolean", "default": False}},
                "additionalProperties": True,
            }
        },
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
    },
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "MLflow's JSON answer; with `stream: true`: " + SSE_DESCRIPTION,
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 404, 413, 415, 429, 503, 504),
}


@router.post(
    "/invocations",
    response_model=None,
    responses=_RESPONSES,
    openapi_extra={"requestBody": _REQUEST_BODY},
)
async def invocations(request: Request) -> Response:
    """Score the model (`predict`), or stream it (`predict_stream`) with `"stream": true`."""
    timings = RequestTimings()
    state = get_state(request)
    model = state.served.pyfunc
    if model is None:
        raise UnsupportedEndpoint(f"{state.served.name!r} has no MLflow pyfunc form to serve at /invocations")
    body = await request.body()
    content_type = request.headers.get("content-type") or mlflow_scoring.JSON
    payload = await _json_payload(body, content_type)
    stream = _pop_stream_flag(payload)
    if payload is not None:
        payload = mlflow_scoring.flatten_llm_params(payload)
    if stream:
        if not state.served.streams_invocations:
            raise UnsupportedEndpoint(f"{state.served.name!r} does not implement predict_stream")
        assert payload is not None
        return await _stream(state, model, payload, timings)
    return await _predict(state, model, body if payload is None else payload, content_type, timings)


async def _json_payload(body: bytes, content_type: str) -> dict[str, Any] | None:
    """The JSON object of a JSON body; None for other bodies (MLflow's parser then answers)."""
    if content_type.split(";")[0].strip().lower() != mlflow_scoring.JSON:
        return None
    try:
        if len(body) > _INLINE_JSON_BYTES:
            payload = await asyncio.to_thread(json.loads, body)
        else:
            payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _pop_stream_flag(payload: dict[str, Any] | None) -> bool:
    if payload is None or "stream" not in payload:
        return False
    stream = payload.pop("stream")
    if not isinstance(stream, bool):
        raise InvalidRequest.single("stream", "must be true or false")
    return stream


async def _predict(
    state: ServerState, model: Any, data: Any, content_type: str, timings: RequestTimings
) -> Response:
    def score() -> Any:
        return iter((mlflow_scoring.predict(model, data, content_type),))

    generation = await start_generation(state, score, timings, _no_summary)
    try:
        answer = await generation.stream.__anext__()
    except Exception as exc:
        timings.outcome = timings.outcome or "error"
        return _error_answer(exc)
    finally:
        generation.close()
    timings.outcome = "stop" if answer.status == 200 else "error"
    return Response(answer.body, status_code=answer.status, media_type=answer.media_type)


async def _stream(
    state: ServerState, model: Any, payload: dict[str, Any], timings: RequestTimings
) -> Response:
    generation = await start_generation(
        state, lambda: mlflow_scoring.predict_stream(model, payload), timings, _summarize_chunk
    )
    try:
        first = await generation.stream.__anext__()  # the model checks its input here
    except StopAsyncIteration:
        first = None
    except Exception as exc:
        timings.outcome = timings.outcome or "error"
        generation.close()
        return _error_answer(exc)
    return StreamResponse(_events(generation, first), on_close=generation.close)


async def _events(generation: Generation[Any], first: Any) -> AsyncIterator[bytes]:
    timings = generation.timings
    try:
        if first is not None:
            _note_chunk(timings, first)
            yield event(mlflow_scoring.chunk_json(first))
            async for chunk in generation.stream:
                _note_chunk(timings, chunk)
                yield event(mlflow_scoring.chunk_json(chunk))
    except Exception as exc:
        timings.outcome = timings.outcome or "error"
        yield event(json.dumps(_stream_error_body(exc), ensure_ascii=False))
    finally:
        generation.close()
    yield DONE


def _note_chunk(timings: RequestTimings, chunk: Any) -> None:
    if not (isinstance(chunk, dict) and chunk.get("finish_reason")):  # llmflow's final chunk has no text
        timings.token()


def _summarize_chunk(last: Any) -> Summary:
    """llmflow models end their stream with `{"finish_reason", "usage"}`; other models may not."""
    if not isinstance(last, dict):
        return None, None, None
    usage = last.get("usage")
    reason = last.get("finish_reason")
    reason = reason if isinstance(reason, str) else None
    if not isinstance(usage, dict):
        return reason, None, None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        reason,
        prompt if isinstance(prompt, int) else None,
        completion if isinstance(completion, int) else None,
    )


def _no_summary(last: Any) -> Summary:
    return None, None, None


def _error_answer(exc: Exception) -> Response:
    """Before streaming began: llmflow's own errors by the table, the model's in MLflow's shape."""
    if isinstance(exc, LlmflowError):
        return error_response(exc)
    error = mlflow_scoring.as_mlflow_error(exc)
    return Response(
        mlflow_scoring.error_body(error),
        status_code=error.get_http_status_code(),
        media_type="application/json",
    )


def _stream_error_body(exc: Exception) -> dict[str, Any]:
    """After streaming began: an error event in OpenAI's shape."""
    if isinstance(exc, LlmflowError):
        return llmflow_error_body(exc)
    if isinstance(exc, MlflowException):
        return error_body(exc.message, "invalid_request_error", str(exc.error_code))
    logger.error("the model failed while streaming", exc_info=exc)
    return error_body(
        f"the model failed while streaming: {type(exc).__name__}: {exc}", "server_error", "model_error"
    )
