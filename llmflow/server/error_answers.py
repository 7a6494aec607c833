"""The one place where errors become HTTP answers: status, OpenAI's error shape (Databricks' and
Anthropic's on their own paths), headers.

llmflow errors are mapped by class (never by message text) through `ERROR_TABLE`; the most
specific class listed wins.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from llmflow.errors import (
    FieldProblem,
    InvalidRequest,
    LlmflowError,
    QueueFull,
    QueueTimeout,
    RequestReadTimeout,
    TooManyConnections,
    Unauthorized,
)
from llmflow.wire.errors import (
    anthropic_error,
    anthropic_error_of,
    anthropic_sse_error,
    anthropic_status_of,
    error_body,
    internal_error_body,
    llmflow_error_body,
    sse_error_event,
    status_of,
)
from llmflow.wire.sse import event

logger = logging.getLogger(__name__)


def error_headers(error: LlmflowError) -> dict[str, str]:
    if isinstance(error, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(error, RequestReadTimeout):  # the rest of the body may still come: not on this connection
        return {"Connection": "close"}
    retry_after = getattr(error, "retry_after_s", None)
    if isinstance(error, (QueueFull, QueueTimeout, TooManyConnections)) and retry_after is not None:
        return {"Retry-After": str(retry_after)}
    return {}


#: Databricks Model Serving's paths: their clients read errors in Databricks' shape
SERVING_ENDPOINTS = "/serving-endpoints/"
#: HTTP status -> Databricks error code (what Databricks' SDK maps back to the status)
_DATABRICKS_CODES = {
    400: "INVALID_PARAMETER_VALUE",
    401: "UNAUTHENTICATED",
    404: "RESOURCE_DOES_NOT_EXIST",
    429: "REQUEST_LIMIT_EXCEEDED",
    503: "TEMPORARILY_UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


#: Anthropic's Messages API: its clients read errors in Anthropic's shape
ANTHROPIC_PATHS = ("/v1/messages", "/v1/messages/count_tokens")


def error_response(error: LlmflowError, path: str = "") -> JSONResponse:
    """The error's answer in the shape the clients of `path` read: as Databricks' REST APIs
    answer (`{"error_code", "message"}`) on its serving-endpoint paths, as Anthropic's API on
    its paths, else in OpenAI's shape."""
    status, _ = status_of(error)
    if path in ANTHROPIC_PATHS:
        status = anthropic_status_of(error)
        return JSONResponse(anthropic_error_of(error), status_code=status, headers=error_headers(error))
    if path.startswith(SERVING_ENDPOINTS):
        code = _DATABRICKS_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "BAD_REQUEST")
        body: dict[str, Any] = {"error_code": code, "message": str(error)}
    else:
        body = llmflow_error_body(error)
    return JSONResponse(body, status_code=status, headers=error_headers(error))


#: the routes that stream the Responses API's events, whose clients read its `error` event
RESPONSES_PATHS = ("/v1/responses", "/responses")


def sse_error_event_for(path: str, error: LlmflowError) -> bytes:
    """An error after the stream of `path` began, as the event its clients read: the Responses
    API's `error` event on its routes, Anthropic's on its own, OpenAI's error object elsewhere."""
    if path in ANTHROPIC_PATHS:
        return anthropic_sse_error(error)
    if path not in RESPONSES_PATHS:
        return sse_error_event(error)
    detail = {"code": error.code, "message": str(error), "param": error.param}
    payload = {"type": "error", **detail, "error": {"type": status_of(error)[1], **detail}}
    return event(json.dumps(payload, ensure_ascii=False))


def validation_problems(exc: RequestValidationError) -> list[FieldProblem]:
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ()) if part != "body"]
        field = ".".join(loc) or "body"
        message = "unknown field" if error.get("type") == "extra_forbidden" else error.get("msg", "invalid")
        problems.append(FieldProblem(field, message))
    return problems


async def _on_llmflow_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LlmflowError)
    return error_response(exc, request.url.path)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(InvalidRequest(validation_problems(exc)), request.url.path)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
    if status == 404:
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail) if exc.detail else phrase
    code = phrase.lower().replace(" ", "_")
    type_ = "not_found_error" if status == 404 else "invalid_request_error"
    if request.url.path in ANTHROPIC_PATHS:
        return JSONResponse(anthropic_error(status, message), status_code=status, headers=exc.headers)
    return JSONResponse(error_body(message, type_, code), status_code=status, headers=exc.headers)


async def _on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error on %s %s", request.method, request.url.path)
    # The exception goes on to the server, which closes the connection once this answer is out:
    # say so, or a client reusing the connection gets a reset.
    body = anthropic_error_of(exc) if request.url.path in ANTHROPIC_PATHS else internal_error_body(exc)
    return JSONResponse(body, status_code=500, headers={"Connection": "close"})


EXCEPTION_HANDLERS = {
    LlmflowError: _on_llmflow_error,
    RequestValidationError: _on_validation_error,
    HTTPException: _on_http_error,
    Exception: _on_unexpected_error,
}
