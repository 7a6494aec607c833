"""The Responses API: OpenAI's `POST /v1/responses` for any llmflow model, and MLflow's
ResponsesAgent routes (`POST /responses`, and `/invocations` of a model logged with
`interface="responses"`), as MLflow's AgentServer answers them.

All of them prepare the request before the response starts (bad input is a 4xx JSON answer),
generate through the server's pipeline (admission, batching, the record) and write the same
events (`ResponsesFormat`). Stateless: `store` is false and `previous_response_id` is refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from mlflow.exceptions import MlflowException

from llmflow.errors import InvalidRequest, LlmflowError, UnsupportedEndpoint, valid_unicode
from llmflow.llm import LLM
from llmflow.observability import RequestTimings
from llmflow.observability.trace import SPAN_TYPE_CHAT
from llmflow.responses.request import read_request
from llmflow.responses.turn import PreparedResponse, prepare_response
from llmflow.server.event_stream import PING_INTERVAL_S, EventStream
from llmflow.server.model_registry import model_for
from llmflow.server.openai import llm_for
from llmflow.server.pipeline import collect, observe, stream_events
from llmflow.server.responses_format import ResponsesFormat
from llmflow.server.running import start_generation
from llmflow.server.schemas import SSE_DESCRIPTION, ResponsesRequest, error_responses
from llmflow.server.state import ModelState
from llmflow.types import CancelToken

router = APIRouter(tags=["Responses"])

RESPONSES_SPAN = "llmflow.responses"
#: llmflow's sampling params a /v1/responses body may carry as extensions
_EXTENSIONS = ("top_k", "min_p", "repetition_penalty", "stop", "seed")
_DOC = {
    200: {
        "description": "a `response` object; with `stream: true`: " + SSE_DESCRIPTION,
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 404, 413, 429, 503, 504),
}


@router.post("/v1/responses", response_model=None, responses=_DOC, tags=["OpenAI"])
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    """OpenAI's Responses API (stateless), streamed as OpenAI streams it or whole."""
    timings = RequestTimings()
    state = await model_for(request, body.model)
    llm = llm_for(state)
    fields = body.model_dump(exclude_none=True)
    extensions = {name: fields.pop(name) for name in _EXTENSIONS if name in fields}
    read = read_request(fields, extensions, params_field="")
    with valid_unicode("input"):
        prepared = await asyncio.to_thread(prepare_response, llm, read, state.served.name, fields)
    inputs = body.model_dump(exclude_unset=True)
    return await answer(state, request, llm, prepared, timings, stream=body.stream, inputs=inputs)


_AGENT_REQUEST = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "MLflow's ResponsesAgentRequest; llmflow sampling params in `custom_inputs`",
                "required": ["input"],
                "properties": {
                    "model": {"type": "string", "description": "a served model's name; default: the first"},
                    "input": {"type": "array", "items": {"type": "object"}},
                    "instructions": {"type": "string"},
                    "max_output_tokens": {"type": "integer"},
                    "temperature": {"type": "number"},
                    "top_p": {"type": "number"},
                    "custom_inputs": {"type": "object"},
                    "stream": {"type": "boolean", "default": False},
                },
                "additionalProperties": True,
            }
        }
    },
}


@router.post(
    "/responses",
    response_model=None,
    responses=_DOC,
    tags=["MLflow"],
    openapi_extra={"requestBody": _AGENT_REQUEST},
)
async def agent_responses(request: Request) -> Response:
    """MLflow AgentServer's route for OpenAI clients: a `ResponsesAgentRequest` answered in the
    Responses format by the model its `model` names, as every OpenAI route (none: the default
    model, since MLflow's AgentServer needs none); llmflow sampling params go in `custom_inputs`."""
    timings = RequestTimings()
    payload = _json_object(await request.body())
    state = await model_for(request, _model_name(payload))
    return await answer_agent(state, request, payload, pop_stream_flag(payload), timings)


async def answer_agent(
    state: ModelState,
    request: Request,
    payload: dict[str, Any],
    stream: bool,
    timings: RequestTimings,
    *,
    ping_s: float | None = PING_INTERVAL_S,
    on_error: Callable[[Exception], Response] | None = None,
) -> Response:
    """A ResponsesAgent request through the served agent's own checks; its refusals answered by
    `on_error` (MLflow's shape at /invocations), else in OpenAI's shape."""
    agent = state.served.responses_agent()
    if agent is None or agent.llm is None:
        raise UnsupportedEndpoint(f"{state.served.name!r} is not an llmflow model: it has no Responses route")
    payload.pop("model", None)  # resolved by the route already; the agent itself takes none
    try:
        prepared = await asyncio.to_thread(agent.prepare, payload, state.served.name)
    except Exception as exc:
        if on_error is not None:
            return on_error(exc)
        raise _llmflow_error(exc) from None
    return await answer(
        state, request, agent.llm, prepared, timings, stream=stream, inputs=payload, ping_s=ping_s
    )


async def answer(
    state: ModelState,
    request: Request,
    llm: LLM,
    prepared: PreparedResponse,
    timings: RequestTimings,
    *,
    stream: bool,
    inputs: dict[str, Any],
    ping_s: float | None = PING_INTERVAL_S,
) -> Response:
    """Generate and write the answer in the Responses format, streamed (text and call pieces
    as they come, with SSE comments every `ping_s` while idle) or whole."""
    cancel = CancelToken()
    observed = observe(state, timings, RESPONSES_SPAN, lambda: inputs, span_type=SPAN_TYPE_CHAT)
    fmt = ResponsesFormat(prepared.events)
    if stream:
        source = lambda: prepared.pieces(llm.stream_prepared(prepared.request, cancel))  # noqa: E731
    else:
        source = lambda: llm.stream_prepared(prepared.request, cancel)  # noqa: E731
    generation = await start_generation(state, source, observed, request.receive, fmt.final_of, cancel)
    if stream:
        return EventStream(stream_events(generation, fmt), on_close=generation.close, ping_interval_s=ping_s)
    [completion] = await collect(generation, request.receive)
    return JSONResponse(prepared.answer(completion))


def _llmflow_error(exc: Exception) -> Exception:
    """A model's refusal as an llmflow error (the server's error table answers it); any other
    failure stays what it is."""
    inner = getattr(exc, "error", None)
    if isinstance(inner, LlmflowError):
        return inner
    if isinstance(exc, MlflowException):
        return InvalidRequest.single("body", exc.message)
    return exc


def _model_name(payload: dict[str, Any]) -> str | None:
    """The served model a ResponsesAgentRequest names; None (absent or null) is the default one."""
    name = payload.get("model")
    if name is not None and not isinstance(name, str):
        raise InvalidRequest.single("model", "must be a string: a served model's name")
    return name


def pop_stream_flag(payload: dict[str, Any]) -> bool:
    stream = payload.pop("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest.single("stream", "must be true or false")
    return stream


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        raise InvalidRequest.single("body", "must be a JSON object (a ResponsesAgentRequest)")
    return payload
