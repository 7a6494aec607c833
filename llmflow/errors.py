"""llmflow's errors. Each carries its data as attributes so callers (HTTP, CLI, MLflow) map
them by type, never by message text."""

from __future__ import annotations

from dataclasses import dataclass


class LlmflowError(Exception):
    """Base class of every error llmflow raises on purpose."""

    #: OpenAI-style error code; the HTTP layer maps errors to status codes by class.
    code: str = "llmflow_error"
    #: the request field at fault, when there is one
    param: str | None = None


@dataclass(frozen=True)
class FieldProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidRequest(LlmflowError):
    """Bad input from a caller: params, messages or prompt. Names every field at fault."""

    code = "invalid_request"

    def __init__(self, problems: list[FieldProblem]):
        self.problems = problems
        self.param = problems[0].field if problems else None
        fields = ", ".join(p.field for p in problems)
        details = "; ".join(str(p) for p in problems)
        super().__init__(f"invalid {fields}: {details}")

    @classmethod
    def single(cls, field: str, message: str) -> InvalidRequest:
        return cls([FieldProblem(field, message)])


class InvalidParams(InvalidRequest):
    code = "invalid_params"


class InvalidMessages(InvalidRequest):
    code = "invalid_messages"


class ContextLengthExceeded(LlmflowError):
    code = "context_length_exceeded"
    param = "messages"

    def __init__(self, prompt_tokens: int, n_ctx: int):
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt has {prompt_tokens} tokens but the model's context window is {n_ctx} "
            "tokens (and at least one token must be left to generate); shorten the prompt or "
            "load the model with a larger n_ctx"
        )


class ChatTemplateError(LlmflowError):
    """A chat template that does not parse, fails to render, or tries something unsafe."""

    code = "chat_template_error"


class ModelNotFound(LlmflowError):
    code = "model_not_found"

    def __init__(self, message: str):
        super().__init__(message)


class UnknownEngine(LlmflowError):
    code = "unknown_engine"

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(f"unknown engine {name!r}; known engines: {', '.join(known)}")


class EngineUnavailable(LlmflowError):
    """An engine whose optional dependency is not installed or whose hardware is missing."""

    code = "engine_unavailable"


class QueueFull(LlmflowError):
    code = "queue_full"

    def __init__(self, limit: int, retry_after_s: int = 1):
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the server is busy: {limit} requests are already waiting; retry later")
