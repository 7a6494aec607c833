"""Errors in the wire shapes: the status and OpenAI error type of each llmflow error (by class,
never by message text; the most specific class listed wins), OpenAI's error object and
Anthropic's, and the SSE events that tell a client a stream failed after it began."""

from __future__ import annotations

import json
from typing import Any

from llmflow.errors import (
    ChatTemplateError,
    ClientDisconnected,
    ContextLengthExceeded,
    EngineUnavailable,
    InvalidRequest,
    LlmflowError,
    ModelNotFound,
    ModelTooLarge,
    QueueFull,
    QueueTimeout,
    ReplicaLost,
    RequestReadTimeout,
    RequestTimeout,
    RequestTooLarge,
    ResponseNotFound,
    TooManyConnections,
    Unauthorized,
    UnsupportedEndpoint,
)
from llmflow.wire.sse import event

#: llmflow error class -> (HTTP status, OpenAI error type)
ERROR_TABLE: dict[type[LlmflowError], tuple[int, str]] = {
    InvalidRequest: (400, "invalid_request_error"),  # InvalidParams, InvalidMessages
    ContextLengthExceeded: (400, "invalid_request_error"),
    ChatTemplateError: (400, "invalid_request_error"),
    ModelTooLarge: (400, "invalid_request_error"),  # never loadable here: not worth a retry
    Unauthorized: (401, "authentication_error"),
    ModelNotFound: (404, "not_found_error"),
    UnsupportedEndpoint: (404, "not_found_error"),
    ResponseNotFound: (404, "invalid_request_error"),  # as OpenAI answers an unknown response id
    RequestReadTimeout: (408, "invalid_request_error"),
    RequestTooLarge: (413, "invalid_request_error"),
    QueueFull: (429, "rate_limit_error"),
    ClientDisconnected: (499, "client_closed_request"),  # nobody reads it; counted in the metrics
    QueueTimeout: (503, "overloaded_error"),
    TooManyConnections: (503, "overloaded_error"),
    EngineUnavailable: (503, "server_error"),
    ReplicaLost: (503, "server_error"),
    RequestTimeout: (504, "timeout_error"),
    LlmflowError: (500, "server_error"),
}


def status_of(error: LlmflowError) -> tuple[int, str]:
    for cls in type(error).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]  # type: ignore[index]
    return 500, "server_error"


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def llmflow_error_body(error: LlmflowError) -> dict[str, Any]:
    _, type_ = status_of(error)
    return error_body(str(error), type_, error.code, error.param)


def internal_error_body(error: BaseException) -> dict[str, Any]:
    """An unexpected failure: its class name only, details go to the log."""
    if isinstance(error, LlmflowError):
        return llmflow_error_body(error)
    return error_body(
        f"internal error ({type(error).__name__}); see the server log", "server_error", "internal_error"
    )


def sse_error_event(error: BaseException) -> bytes:
    """An error after streaming began: one SSE event in OpenAI's error shape (then [DONE])."""
    return event(json.dumps(internal_error_body(error), ensure_ascii=False))


#: HTTP status -> Anthropic's error type (other statuses: api_error from 500 on, else invalid_request_error)
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: Anthropic's status for a server too busy to take the request (llmflow's 503 overloaded_error)
ANTHROPIC_OVERLOADED = 529


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`, the type read from the status."""
    fallback = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, fallback), "message": message}}


def anthropic_status_of(error: BaseException) -> int:
    """The status Anthropic's clients expect: 529 for an overloaded server, else llmflow's own."""
    if not isinstance(error, LlmflowError):
        return 500
    status, type_ = status_of(error)
    return ANTHROPIC_OVERLOADED if type_ == "overloaded_error" else status


def anthropic_error_of(error: BaseException) -> dict[str, Any]:
    """An error in Anthropic's shape; an unexpected failure by its class name only."""
    message = internal_error_body(error)["error"]["message"]
    return anthropic_error(anthropic_status_of(error), message)


def anthropic_sse_error(error: BaseException) -> bytes:
    """An error after an Anthropic stream began: its `error` event."""
    payload = json.dumps(anthropic_error_of(error), ensure_ascii=False)
    return b"event: error\ndata: " + payload.encode() + b"\n\n"
