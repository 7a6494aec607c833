"""The Responses API: OpenAI's `POST /v1/responses` for any llmflow model, and MLflow's
ResponsesAgent routes (`POST /responses`, and `/invocations` of a model logged with
`interface="responses"`), as MLflow's AgentServer answers them.

All of them prepare the request before the response starts (bad input is a 4xx JSON answer),
generate through the server's pipeline (admission, batching, the record) and write the same
events (`ResponsesFormat`).

`/v1/responses` is stateful as OpenAI's is: a response is kept (`store`, true by default) in the
server's `ResponseStore` with the input items it was generated from; `previous_response_id`
continues a kept one (its input and output items, then the new input); `GET` and `DELETE
/v1/responses/{response_id}` and `GET /v1/responses/{response_id}/input_items` read and drop
them. The ResponsesAgent routes keep nothing, as MLflow's AgentServer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from mlflow.exceptions import MlflowException

from llmflow.errors import InvalidRequest, LlmflowError, ResponseNotFound, UnsupportedEndpoint, valid_unicode
from llmflow.llm import LLM
from llmflow.observability import RequestTimings
from llmflow.observability.trace import SPAN_TYPE_CHAT
from llmflow.responses.items import input_items
from llmflow.responses.request import read_request
from llmflow.responses.turn import PreparedResponse, prepare_response
from llmflow.server.event_stream import PING_INTERVAL_S, EventStream
from llmflow.server.model_registry import adapter_param, model_for
from llmflow.server.openai import llm_for
from llmflow.server.pipeline import observe
from llmflow.server.response_store import ResponseStore, StoredResponse
from llmflow.server.schemas import SSE_DESCRIPTION, ResponsesRequest, error_responses
from llmflow.server.state import ModelState, get_state
from llmflow.server.transport import events, serve, start
from llmflow.wire.responses import ResponsesEncoder

router = APIRouter(tags=["Responses"])

RESPONSES_SPAN = "llmflow.responses"
#: llmflow's sampling params a /v1/responses body may carry as extensions
_EXTENSIONS = ("top_k", "min_p", "repetition_penalty", "stop", "seed", "lora", "lora_scale")
_DOC = {
    200: {
        "description": "a `response` object; with `stream: true`: " + SSE_DESCRIPTION,
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 404, 413, 429, 503, 504),
}


@router.post("/v1/responses", response_model=None, responses=_DOC, tags=["OpenAI"])
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    """OpenAI's Responses API, streamed as OpenAI streams it or whole; the response is kept
    unless `store` is false, and `previous_response_id` continues a kept one."""
    timings = RequestTimings()
    state = await model_for(request, body.model)
    llm = llm_for(state)
    fields = body.model_dump(exclude_none=True)
    extensions = {name: fields.pop(name) for name in _EXTENSIONS if name in fields}
    extensions.update(adapter_param(state, body.model, extensions.get("lora")))
    store = get_state(request).responses
    turn = Turn.of(fields, store)
    read = read_request(fields, extensions, params_field="", earlier=turn.earlier)
    read = dataclasses.replace(read, messages=await get_state(request).images.read(read.messages))
    echo = {**fields, "store": turn.store, "previous_response_id": turn.previous_response_id}
    with valid_unicode("input"):
        prepared = await asyncio.to_thread(prepare_response, llm, read, state.served.name, echo)
    inputs = body.model_dump(exclude_unset=True)
    on_end = turn.keeper(store, fields["input"])
    return await answer(
        state, request, llm, prepared, timings, stream=body.stream, inputs=inputs, on_end=on_end
    )


@dataclass(frozen=True)
class Turn:
    """What a `/v1/responses` request says of the kept conversation: the one it continues
    (`previous_response_id`: its items come before the new input) and whether it is kept."""

    store: bool = True
    previous_response_id: str | None = None
    earlier: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, fields: dict[str, Any], store: ResponseStore) -> Turn:
        """Takes `store` and `previous_response_id` out of `fields`; an unknown id is a 404."""
        keep = fields.pop("store", True)
        previous = fields.pop("previous_response_id", None)
        if previous is None:
            return cls(keep)
        stored = store.get(previous)
        if stored is None:
            raise ResponseNotFound(previous, "previous_response_id")
        return cls(keep, previous, stored.conversation)

    def keeper(
        self, store: ResponseStore, value: str | list[Mapping[str, Any]]
    ) -> Callable[[dict[str, Any]], None] | None:
        """What keeps the answer's response object with its input items (None: not kept)."""
        if not self.store:
            return None
        items = [*self.earlier, *input_items(value)]
        return lambda response: store.put(StoredResponse(response, items))


def _stored(request: Request, response_id: str) -> StoredResponse:
    stored = get_state(request).responses.get(response_id)
    if stored is None:
        raise ResponseNotFound(response_id, "response_id")
    return stored


_KEPT_ERRORS = error_responses(401, 404)


@router.get("/v1/responses/{response_id}", response_model=None, responses=_KEPT_ERRORS, tags=["OpenAI"])
async def retrieve_response(response_id: str, request: Request) -> JSONResponse:
    """A kept response object, as it was answered."""
    return JSONResponse(_stored(request, response_id).response)


@router.delete("/v1/responses/{response_id}", response_model=None, responses=_KEPT_ERRORS, tags=["OpenAI"])
async def delete_response(response_id: str, request: Request) -> JSONResponse:
    """Drop a kept response; a later `previous_response_id` naming it is a 404."""
    _stored(request, response_id)
    get_state(request).responses.delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})  # as OpenAI answers


@router.get(
    "/v1/responses/{response_id}/input_items", response_model=None, responses=_KEPT_ERRORS, tags=["OpenAI"]
)
async def list_input_items(
    response_id: str,
    request: Request,
    after: str | None = None,
    limit: str | None = None,
    order: str | None = None,
) -> JSONResponse:
    """The input items a kept response was generated from (the earlier turns' included), as
    OpenAI lists them: `order` desc (newest first, the default) or asc, `limit` 1-100 (20),
    from the item after `after`."""
    items = _stored(request, response_id).input_items
    return JSONResponse(item_page(items, after, limit, order))


def item_page(items: list[dict[str, Any]], after: str | None, limit: str | None, order: str | None) -> dict:
    """One page of a list object (`data`, `first_id`, `last_id`, `has_more`)."""
    if order not in (None, "asc", "desc"):
        raise InvalidRequest.single("order", "must be asc or desc")
    count = _limit(limit)
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise InvalidRequest.single("after", f"no input item {after!r} in this response")
        start = ids.index(after) + 1
    page = ordered[start : start + count]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + count < len(ordered),
    }


def _limit(limit: str | None) -> int:
    if limit is None:
        return 20
    try:
        count = int(limit)
    except ValueError:
        count = 0
    if not 1 <= count <= 100:
        raise InvalidRequest.single("limit", "must be an integer from 1 to 100")
    return count


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
    model = _model_name(payload)
    state = await model_for(request, model)
    _with_adapter(payload, state, model)
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
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> Response:
    """Generate and write the answer in the Responses format, streamed (text and call pieces
    as they come, with SSE comments every `ping_s` while idle) or whole; `on_end` is handed the
    final response object of an answer that ended (not of one cut by an error)."""
    observed = observe(state, timings, RESPONSES_SPAN, lambda: inputs, span_type=SPAN_TYPE_CHAT)
    encoder = ResponsesEncoder(prepared.events, on_end)
    generation = await start(state, llm, prepared.generation, observed, request.receive)
    if stream:
        return EventStream(events(generation, encoder), on_close=generation.close, ping_interval_s=ping_s)
    return await serve(generation, encoder, stream=False, receive=request.receive)


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


def _with_adapter(payload: dict[str, Any], state: ModelState, model: str | None) -> None:
    """The LoRA adapter `model` names as BASE:ADAPTER as the `lora` of `custom_inputs`, where a
    ResponsesAgent reads llmflow's params (a `lora` there wins)."""
    custom = payload.get("custom_inputs")
    given = custom.get("lora") if isinstance(custom, Mapping) else None
    adapter = adapter_param(state, model, given)
    if adapter and (custom is None or isinstance(custom, Mapping)):
        payload["custom_inputs"] = {**(custom or {}), **adapter}


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
