"""Anthropic's Messages API: `POST /v1/messages` (streamed or whole) and
`POST /v1/messages/count_tokens`, for any llmflow model.

A request is read into a chat request's parts (`anthropic_request`), prepared as the chat route
prepares its own (tool plan, constraint, template; bad input is a 4xx before any byte of the
answer), generated as one `Generation` and written by `llmflow.wire.anthropic`. Errors are
in Anthropic's shape on these paths (`error_answers`); the key may come as `x-api-key`, and
`anthropic-version` / `anthropic-beta` headers are accepted (and not read).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from llmflow.errors import valid_unicode
from llmflow.generation import GenerationRequest
from llmflow.llm import LLM, PreparedRequest
from llmflow.observability import RequestTimings
from llmflow.observability.trace import SPAN_TYPE_CHAT
from llmflow.server.anthropic_request import MessagesInput, count_tokens, read_request
from llmflow.server.anthropic_schemas import CountTokensRequest, MessagesRequest
from llmflow.server.event_stream import EventStream
from llmflow.server.model_registry import adapter_param, model_for
from llmflow.server.openai import llm_for, prepare
from llmflow.server.pipeline import observe
from llmflow.server.state import ModelState, get_state
from llmflow.server.transport import events, serve, start
from llmflow.tools import ToolCallFormat
from llmflow.wire.anthropic import PING_EVENT, MessagesEncoder

router = APIRouter(prefix="/v1", tags=["Anthropic"])

MESSAGES_SPAN = "llmflow.messages"


class _Error(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    type: str
    error: _Error


class TokenCount(BaseModel):
    input_tokens: int


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": AnthropicError} for status in statuses}


_DOC = {
    200: {
        "description": "a Message object; with `stream: true`, `text/event-stream` of Anthropic's events "
        "(`event: NAME` and `data: {json}`): message_start, ping, content_block_start / _delta / _stop "
        "per block, message_delta, message_stop; an error after the stream began is an `error` event",
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    **_errors(400, 401, 404, 413, 429, 500, 529),
}


@router.post("/messages", response_model=None, responses=_DOC)
async def create_message(body: MessagesRequest, request: Request) -> Response:
    """Answer a conversation in Anthropic's Messages format; with `tools`, the answer may call
    them (`tool_use` blocks)."""
    timings = RequestTimings()
    state = await model_for(request, body.model)
    llm = llm_for(state)
    read = await _read(request, body)
    plan = read.plan(llm)
    defaults = llm.default_params.merged(adapter_param(state, body.model))  # `model` as BASE:ADAPTER
    prepared = await prepare(
        llm,
        plan.messages,
        read.sampling(defaults),
        raw=False,
        plan=plan,
        constraint=plan.constraint,
        tools=plan.template_tools,
        reasoning_format=state.settings.reasoning_format,
        template_vars=read.template_vars,
    )
    calls = plan.format if plan.active else None
    return await _answer(state, request, llm, prepared, body, timings, calls)


@router.post("/messages/count_tokens", response_model=TokenCount, responses=_errors(400, 401, 404, 413, 500))
async def count_message_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
    """The prompt tokens a Messages request with this conversation, system prompt and tools
    would have (rendered as a generation renders them)."""
    llm = llm_for(await model_for(request, body.model))
    read = await _read(request, body)
    with valid_unicode("messages"):
        tokens = await asyncio.to_thread(count_tokens, llm, read)
    return JSONResponse({"input_tokens": tokens})


async def _read(request: Request, body: MessagesRequest | CountTokensRequest) -> MessagesInput:
    """The request read, its images with them (`llmflow.media`, as this server allows)."""
    read = read_request(body)
    images = await get_state(request).images.read(read.messages)
    return dataclasses.replace(read, messages=images)


async def _answer(
    state: ModelState,
    request: Request,
    llm: LLM,
    prepared: PreparedRequest,
    body: MessagesRequest,
    timings: RequestTimings,
    calls: ToolCallFormat | None,
) -> Response:
    """Generate, and write the events as they come or the whole Message at the end."""
    observed = observe(
        state, timings, MESSAGES_SPAN, lambda: body.model_dump(exclude_unset=True), span_type=SPAN_TYPE_CHAT
    )
    encoder = MessagesEncoder(state.served.name, len(prepared.prompt_ids), body.stop_sequences or ())
    generation = await start(state, llm, GenerationRequest(prepared, calls=calls), observed, request.receive)
    if body.stream:
        stream = events(generation, encoder, done=b"")
        return EventStream(stream, on_close=generation.close, ping=PING_EVENT)
    return await serve(generation, encoder, stream=False, receive=request.receive)
