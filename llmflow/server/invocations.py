"""POST /invocations: MLflow's scoring protocol, as `mlflow models serve` answers it, plus
streaming: with `"stream": true` the answer is `text/event-stream`, one `data: <chunk json>` per
`predict_stream` chunk, then `data: [DONE]` (the format Databricks Model Serving uses).

Errors from the model keep MLflow's shape (`{"error_code", "message"}`) and status, as MLflow
clients expect; the server's own refusals (key, limits, queue) use the OpenAI shape everywhere.

An llmflow model joins the server's own pipeline, streamed or not: its input is parsed and
checked as MLflow's `predict` and `predict_stream` would (`mlflow_scoring`), then by the model's
own checks, into prepared requests (a stream's one, or one per `predict` row: the rows of one
request share its place, and a batching engine generates them at once, on the event loop), and
its answer is written as the model writes it. Only a third-party model runs through its pyfunc
`predict` and `predict_stream`.

A model logged as a ResponsesAgent (`interface="responses"`) is answered as MLflow's AgentServer
answers it, in the Responses format (`responses.answer_agent`).

`POST /serving-endpoints/{name}/invocations` is Databricks Model Serving's path for the same thing:
its streams hold nothing but `data:` lines (no ping comments), its errors are in Databricks'
shape, and its whole answers are JSON objects, as MLflow's Databricks client requires (its
`predict` reads the body as a dict): a chat body (`messages`) of an llmflow model is answered as
a `chat.completion`, every other answer MLflow's scoring server leaves bare is wrapped in
`{"predictions": ...}`, as Databricks' custom model endpoints answer.

With tracing on, each request is one MLflow trace (span `llmflow.invocations`); a third-party model
that traces itself nests its spans in it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive

from llmflow.errors import LlmflowError, ModelNotFound, UnknownModel, UnsupportedEndpoint
from llmflow.generation import GenerationRecord, GenerationRequest
from llmflow.observability import RequestTimings
from llmflow.server import mlflow_scoring
from llmflow.server.error_answers import error_response
from llmflow.server.event_stream import PING_INTERVAL_S, EventStream
from llmflow.server.mlflow_format import ChunkDictEncoder
from llmflow.server.model_registry import adapter_named, model_for
from llmflow.server.pipeline import observe
from llmflow.server.responses import answer_agent, pop_stream_flag
from llmflow.server.running import start_generation, stop_on_disconnect
from llmflow.server.schemas import SSE_DESCRIPTION, ErrorResponse, MlflowErrorResponse, error_responses
from llmflow.server.state import ModelState
from llmflow.server.transport import (
    NOTHING_READ,
    events,
    finished_rows,
    start,
    start_rows,
    with_prompt_header,
)
from llmflow.tools import ToolPlan
from llmflow.wire.mlflow_chunks import MlflowChunksEncoder
from llmflow.wire.openai import ChatEncoder

if TYPE_CHECKING:
    from llmflow.llm import PreparedRequest
    from llmflow.mlflow.model import LlmflowPyfuncModel
    from llmflow.mlflow.predict_call import PredictCall

logger = logging.getLogger(__name__)

router = APIRouter(tags=["MLflow"])

INVOCATIONS_SPAN = "llmflow.invocations"

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
    **error_responses(401, 404, 413, 415, 429, 503, 504),
    400: {
        "model": ErrorResponse | MlflowErrorResponse,
        "description": "a bad request; the model's own refusals keep MLflow's shape",
    },
}


@router.post(
    "/invocations",
    response_model=None,
    responses=_RESPONSES,
    openapi_extra={"requestBody": _REQUEST_BODY},
)
async def invocations(request: Request) -> Response:
    """Score the default (first) model (`predict`), or stream it (`predict_stream`) with
    `"stream": true`."""
    return await invoke(request, await model_for(request, None), ping_s=PING_INTERVAL_S)


#: on Databricks' path every error is in Databricks' shape (`{"error_code", "message"}`)
_SERVING_ENDPOINT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _RESPONSES[200],
    **{
        status: {"model": MlflowErrorResponse, "description": "an error in Databricks' shape"}
        for status in (400, 401, 404, 413, 415, 429, 503, 504)
    },
}


@router.post(
    "/serving-endpoints/{name}/invocations",
    response_model=None,
    responses=_SERVING_ENDPOINT_RESPONSES,
    openapi_extra={"requestBody": _REQUEST_BODY},
)
async def serving_endpoint_invocations(name: str, request: Request) -> Response:
    """Databricks Model Serving's path for the served model `name` (what MLflow's
    `get_deploy_client("databricks")` posts to): the same bodies and answers as /invocations;
    its streams hold nothing but `data:` lines (no pings), as that client demands."""
    try:
        state = await model_for(request, name)
    except UnknownModel as exc:
        served = ", ".join(repr(name) for name in exc.served)
        raise ModelNotFound(f"no serving endpoint {name!r}; this server serves {served}") from None
    if adapter_named(name, state.served.name) is not None:  # an endpoint is a model, not an adapter
        raise ModelNotFound(
            f"no serving endpoint {name!r}: serve {state.served.name!r} and pick its LoRA adapter "
            "with the `lora` param"
        )
    return await invoke(request, state, ping_s=None, databricks=True)


async def invoke(
    request: Request, state: ModelState, *, ping_s: float | None, databricks: bool = False
) -> Response:
    """/invocations of the model `state`; `ping_s`: the interval of the SSE comments that keep an
    idle stream alive (None: no comments); `databricks`: answer whole answers as JSON objects, as
    Databricks' endpoints do."""
    timings = RequestTimings()
    served = state.served
    if served.metadata is None:
        raise UnsupportedEndpoint(f"{served.name!r} has no MLflow pyfunc form to serve at /invocations")
    body = await request.body()
    content_type = request.headers.get("content-type") or mlflow_scoring.JSON
    payload = await _json_payload(body, content_type)
    stream = False if payload is None else pop_stream_flag(payload)
    if payload is not None and served.agent is not None:
        return await answer_agent(
            state, request, payload, stream, timings, ping_s=ping_s, on_error=_error_answer
        )
    if payload is not None:
        payload = mlflow_scoring.flatten_llm_params(payload)
    if stream and not served.streams_invocations:
        raise UnsupportedEndpoint(f"{served.name!r} does not implement predict_stream")
    receive = request.receive
    data = body if payload is None else payload
    if served.llmflow_model is not None:
        if stream:
            return await _stream_llmflow(state, served.llmflow_model, data, timings, receive, ping_s)
        chat = databricks and isinstance(data, dict) and "messages" in data
        answer = _predict_llmflow(state, served.llmflow_model, data, content_type, timings, receive, chat)
        return await answer if not databricks else _as_object(await answer)
    assert served.pyfunc is not None
    if stream:
        return await _stream(state, served.pyfunc, data, timings, receive, ping_s)
    answer = _predict(state, served.pyfunc, data, content_type, timings, receive)
    return await answer if not databricks else _as_object(await answer)


def _as_object(answer: Response) -> Response:
    """A whole answer on Databricks' path: a bare list (MLflow's answer to an LLM body) wrapped
    in `{"predictions": ...}`, as Databricks' endpoints answer; objects and errors as they are."""
    if answer.status_code != 200 or not bytes(answer.body).lstrip().startswith(b"["):
        return answer
    body = b'{"predictions": ' + bytes(answer.body) + b"}"
    return Response(body, media_type=mlflow_scoring.JSON)


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


def _trace_inputs(data: Any, content_type: str) -> Callable[[], Any]:
    return lambda: data if isinstance(data, dict) else {"content_type": content_type}


async def _predict(
    state: ModelState, model: Any, data: Any, content_type: str, timings: RequestTimings, receive: Receive
) -> Response:
    """A third-party model's `predict` in a worker, through MLflow's scoring function. It cannot
    be interrupted: a client that disconnects meanwhile frees its place once the model returns."""
    observed = observe(state, timings, INVOCATIONS_SPAN, _trace_inputs(data, content_type))
    trace = observed.trace

    def score() -> Iterator[Any]:
        answer = mlflow_scoring.predict(model, data, content_type)
        if trace is not None:
            trace.set_result(_parsed(answer.body), failed=answer.status >= 400)
        return iter((answer,))

    generation = await start_generation(state, score, observed, receive)
    try:
        with stop_on_disconnect(generation, receive):
            answer = await generation.stream.__anext__()
            # the client has gone: nobody reads this answer
            left = generation.stream.stopped
            observed.decide("cancelled" if left else "stop" if answer.status == 200 else "error")
    except Exception as exc:
        observed.decide("error")
        return _error_answer(exc)
    finally:
        generation.close()
    return Response(answer.body, status_code=answer.status, media_type=answer.media_type)


async def _predict_llmflow(
    state: ModelState,
    python_model: LlmflowPyfuncModel,
    data: Any,
    content_type: str,
    timings: RequestTimings,
    receive: Receive,
    chat: bool = False,
) -> Response:
    """`predict` of an llmflow model in the server's own pipeline: the body parsed and checked
    as MLflow does and by the model's own checks (bad input is a 400 in MLflow's shape before
    any place is taken), the rows generated as one request (`start_rows`), their answers built
    by the model's own code and written as MLflow writes them; with `chat`, a conversation's
    answer is a `chat.completion` instead (Databricks' path)."""
    metadata, llm = state.served.metadata, python_model.llm
    assert metadata is not None and llm is not None
    try:
        parsed = await asyncio.to_thread(
            mlflow_scoring.predict_input, metadata, data, content_type, python_model.prepare_predict
        )
    except Exception as exc:
        return _error_answer(exc)
    if isinstance(parsed, mlflow_scoring.ScoringAnswer):  # a body MLflow does not read: 415
        return Response(parsed.body, status_code=parsed.status, media_type=parsed.media_type)
    call, unwrapped = parsed
    options = call.options
    timed = options.timings and not call.struct
    records: list[GenerationRecord] = []
    if call.generated:  # else every row is a struct result's error record
        inputs = _trace_inputs(data, content_type)
        observed = observe(state, timings, INVOCATIONS_SPAN, inputs, options.trace, python_model.tracing)
        requests = [GenerationRequest(row.request) for row in call.generated]
        generation = await start_rows(state, llm, requests, observed, receive)
        try:
            records = await finished_rows(generation, receive, len(requests))
        except Exception as exc:
            return _error_answer(exc)
    if chat and unwrapped and not call.struct and len(call.rows) == len(records) == 1:
        return JSONResponse(_chat_completion(state.served.name, call, records[0], timed))
    answers = call.answers((r.completions()[0], r.timings if timed else None) for r in records)
    return Response(mlflow_scoring.predictions_json(answers, unwrapped), media_type=mlflow_scoring.JSON)


def _chat_completion(
    model: str, call: PredictCall, row_record: GenerationRecord, timed: bool
) -> dict[str, Any]:
    """A conversation's answer as OpenAI's `chat.completion`, its calls in `message.tool_calls`."""
    (row,) = call.generated
    calls = None if row.plan is None else row.plan.format
    clock = row_record.timings if timed else RequestTimings()
    record = GenerationRecord.of_completion(row_record.completions()[0], calls, clock)
    encoder = ChatEncoder(
        model=model, with_timings=timed, with_logprobs=row.request.params.logprobs is not None
    )
    return encoder.whole(record)


async def _stream(
    state: ModelState,
    model: Any,
    payload: dict[str, Any],
    timings: RequestTimings,
    receive: Receive,
    ping_s: float | None,
) -> Response:
    observed = observe(state, timings, INVOCATIONS_SPAN, lambda: {**payload, "stream": True})
    generation = await start_generation(
        state, lambda: mlflow_scoring.predict_stream(model, payload), observed, receive
    )
    try:
        first = await generation.stream.__anext__()  # the model checks its input here
    except StopAsyncIteration:
        first = NOTHING_READ
    except Exception as exc:
        observed.decide("error")
        generation.close()
        return _error_answer(exc)
    stream = events(generation, ChunkDictEncoder(), watch=ChunkDictEncoder.watch, first=first)
    return EventStream(stream, on_close=generation.close, ping_interval_s=ping_s)


async def _stream_llmflow(
    state: ModelState,
    python_model: LlmflowPyfuncModel,
    payload: dict[str, Any],
    timings: RequestTimings,
    receive: Receive,
    ping_s: float | None,
) -> Response:
    """Bad input is a 400 in MLflow's shape before the stream starts, as from the pyfunc model."""
    metadata = state.served.metadata

    def prepare() -> tuple[Any, Any, PreparedRequest, ToolPlan | None]:
        data, params = mlflow_scoring.stream_input(metadata, payload)
        return python_model.prepare_stream(data, params)

    try:
        _, options, prepared, plan = await asyncio.to_thread(prepare)
    except Exception as exc:
        return _error_answer(exc)
    llm = python_model.llm
    assert llm is not None
    inputs = {**payload, "stream": True}
    observed = observe(state, timings, INVOCATIONS_SPAN, lambda: inputs, options.trace, python_model.tracing)
    request = GenerationRequest(prepared, calls=None if plan is None else plan.format)
    generation = await start(state, llm, request, observed, receive)
    encoder = MlflowChunksEncoder(with_timings=options.timings)
    stream = EventStream(events(generation, encoder), on_close=generation.close, ping_interval_s=ping_s)
    return with_prompt_header(stream, observed)


def _parsed(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def _error_answer(exc: Exception) -> Response:
    """Before streaming began: llmflow's own errors by the table, the model's in MLflow's shape."""
    if isinstance(exc, LlmflowError):
        return error_response(exc)
    error = mlflow_scoring.scoring_error(exc)
    return Response(
        mlflow_scoring.error_body(error),
        status_code=error.get_http_status_code(),
        media_type="application/json",
    )
