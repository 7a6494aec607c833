"""Checks of wire objects against the published schemas: OpenAI's Chat Completions and Completions
objects (the `openai` SDK's types, validated strictly, and the fields OpenAI's OpenAPI document
marks required, which the SDK's lenient types leave optional), and the Open Responses objects and
streaming events (the `openresponses-types` models, validated strictly, and the `openai` SDK's
Responses types)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pydantic
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseItem, ResponseStreamEvent

from tests.extras import need
from tests.fakes.scripted_engine import ScriptedEngine
from tests.observability.engines import FailingEngine
from tests.server.conftest import TIMEOUT_S, running

# -- OpenAI's OpenAPI document: required fields (its `required` lists) and finish reasons ----------------
CHAT_COMPLETION = ("id", "object", "created", "model", "choices")
CHAT_CHOICE = ("index", "message", "finish_reason", "logprobs")
CHAT_MESSAGE = ("role", "content", "refusal")
CHUNK_CHOICE = ("index", "delta", "finish_reason")
TEXT_CHOICE = ("index", "text", "finish_reason", "logprobs")
TOOL_CALL = ("id", "type", "function")
USAGE = ("prompt_tokens", "completion_tokens", "total_tokens")
ERROR = ("message", "type", "param", "code")
CHAT_FINISH = ("stop", "length", "tool_calls", "content_filter", "function_call")
TEXT_FINISH = ("stop", "length", "content_filter")


def _has(body: dict[str, Any], fields: tuple[str, ...], what: str) -> None:
    missing = [name for name in fields if name not in body]
    assert not missing, f"{what} lacks {missing}: {body}"


def _strict(model: Any, body: dict[str, Any]) -> Any:
    """`body` validated by a pydantic model (or type adapter) in strict mode, as JSON (so that an
    enum is read from its string, as a client reads it)."""
    text = json.dumps(body)
    if isinstance(model, pydantic.TypeAdapter):
        return model.validate_json(text, strict=True)
    return model.model_validate_json(text, strict=True)


def check_chat_completion(body: dict[str, Any]) -> ChatCompletion:
    _has(body, CHAT_COMPLETION, "chat.completion")
    for choice in body["choices"]:
        _has(choice, CHAT_CHOICE, "choice")
        _has(choice["message"], CHAT_MESSAGE, "message")
        assert choice["finish_reason"] in CHAT_FINISH
        assert isinstance(choice["message"].get("annotations", []), list)
        for call in choice["message"].get("tool_calls") or ():
            _has(call, TOOL_CALL, "tool call")
    _has(body["usage"], USAGE, "usage")
    return _strict(ChatCompletion, body)


def check_chat_chunk(body: dict[str, Any]) -> ChatCompletionChunk:
    _has(body, CHAT_COMPLETION, "chat.completion.chunk")
    for choice in body["choices"]:
        _has(choice, CHUNK_CHOICE, "chunk choice")
        assert choice["finish_reason"] in (None, *CHAT_FINISH)
        for call in choice["delta"].get("tool_calls") or ():
            assert "index" in call
    if body.get("usage") is not None:
        _has(body["usage"], USAGE, "usage")
    return _strict(ChatCompletionChunk, body)


def check_text_completion(body: dict[str, Any]) -> Completion:
    """A `text_completion`, whole or a streamed chunk (one object type for both)."""
    _has(body, CHAT_COMPLETION, "text_completion")
    for choice in body["choices"]:
        _has(choice, TEXT_CHOICE, "text choice")
        assert choice["finish_reason"] in (None, *TEXT_FINISH)
    if body.get("usage") is not None:
        _has(body["usage"], USAGE, "usage")
    if any(choice["finish_reason"] is None for choice in body["choices"]):
        return Completion.model_construct(**body)  # a chunk before the end: the SDK's type wants a reason
    return _strict(Completion, body)


def check_error_body(body: dict[str, Any]) -> None:
    """OpenAI's `ErrorResponse`: an `error` with message, type, param and code."""
    _has(body["error"], ERROR, "error")
    assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["type"], str)


# -- Open Responses ---------------------------------------------------------------------------------------
def _open_responses() -> Any:
    return need("openresponses_types", "test")


_RESPONSE_EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
_ITEMS = pydantic.TypeAdapter(ResponseItem)


def _spec_response(response: dict[str, Any]) -> dict[str, Any]:
    """The response as openresponses-types can read it: its generated model types a json_schema
    format's `schema` as null (the specification has it as an object), so the schema is checked
    here and left out of the strict validation."""
    fmt = response["text"]["format"]
    if fmt["type"] != "json_schema":
        return response
    assert isinstance(fmt["schema"], dict)
    return {**response, "text": {**response["text"], "format": {**fmt, "schema": None}}}


def check_response(response: dict[str, Any]) -> Response:
    """A response object, valid as Open Responses' `ResponseResource` and as the SDK's `Response`."""
    _strict(_open_responses().ResponseResource, _spec_response(response))
    return _strict(Response, response)


def _event_models() -> dict[str, Any]:
    spec = _open_responses()
    return {
        "response.created": spec.ResponseCreatedStreamingEvent,
        "response.in_progress": spec.ResponseInProgressStreamingEvent,
        "response.completed": spec.ResponseCompletedStreamingEvent,
        "response.incomplete": spec.ResponseIncompleteStreamingEvent,
        "response.failed": spec.ResponseFailedStreamingEvent,
        "response.output_item.added": spec.ResponseOutputItemAddedStreamingEvent,
        "response.output_item.done": spec.ResponseOutputItemDoneStreamingEvent,
        "response.content_part.added": spec.ResponseContentPartAddedStreamingEvent,
        "response.content_part.done": spec.ResponseContentPartDoneStreamingEvent,
        "response.output_text.delta": spec.ResponseOutputTextDeltaStreamingEvent,
        "response.output_text.done": spec.ResponseOutputTextDoneStreamingEvent,
        "response.function_call_arguments.delta": spec.ResponseFunctionCallArgumentsDeltaStreamingEvent,
        "response.function_call_arguments.done": spec.ResponseFunctionCallArgumentsDoneStreamingEvent,
        "error": spec.ErrorStreamingEvent,
    }


def check_event(event: dict[str, Any]) -> str:
    """A streamed event, valid as its Open Responses event and as the SDK's event; its type."""
    kind = event["type"]
    models = _event_models()
    assert kind in models, f"an event kind the specification does not have: {kind}"
    if "response" in event:
        check_response(event["response"])
        spec_event = {**event, "response": _spec_response(event["response"])}
    else:
        spec_event = event
    _strict(models[kind], spec_event)
    _strict(_RESPONSE_EVENTS, event)
    return kind


def check_item(item: dict[str, Any]) -> None:
    """An input item as `input_items` lists it: Open Responses' item and the SDK's `ResponseItem`."""
    spec = _open_responses()
    model = {
        "message": spec.Message,
        "function_call": spec.FunctionCall,
        "function_call_output": spec.FunctionCallOutput,
    }[item["type"]]
    _strict(model, item)
    _strict(_ITEMS, item)


@contextmanager
def beside_scripted_and_failing(served: Any) -> Iterator[httpx.Client]:
    """A client of one server with `served` (the default model), a scripted model and a model whose
    engine fails: the objects of every kind of answer, and of errors, come from one server."""
    from llmflow import LLM
    from llmflow.server import ServedModel

    models = [
        served,
        ServedModel.from_llm(LLM(ScriptedEngine()), "scripted"),
        ServedModel.from_llm(LLM(FailingEngine()), "failing"),
    ]
    with running(models) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        yield client
